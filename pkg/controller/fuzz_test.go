package controller

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/internal/fuzzinput"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// Run a target with, e.g.:
//
//	go test -run '^$' -fuzz '^FuzzProfileHash$' -fuzztime 60s -fuzzminimizetime 5s ./pkg/controller/
//
// (the default minimisation of each new input, up to a minute, takes most of
// a short run). Without -fuzz, go test runs the seeds below and the inputs
// in testdata/fuzz/ as unit tests: the latter are what earlier runs found.

// profileEntry is one key of a profile's data (binary false) or binaryData.
type profileEntry struct {
	binary     bool
	key, value string
}

// encodeProfile writes entries in the form decodeProfile reads, so seeds
// can be stated as entries.
func encodeProfile(entries ...profileEntry) []byte {
	var b []byte
	for _, e := range entries {
		section := byte(0)
		if e.binary {
			section = 1
		}
		b = append(b, section, byte(len(e.key)), byte(len(e.value)))
		b = append(b, e.key...)
		b = append(b, e.value...)
	}
	return b
}

// maxFuzzEntries bounds a fuzzed profile: the checks copy it once per
// variant, so its size costs twice, and a dozen short entries show every
// ambiguity of the encoding that thousands of long ones would.
const maxFuzzEntries = 16

// decodeProfile turns any bytes into a profile: a section byte, a key
// length byte and a value length byte, then the key and the value, over and
// over, up to maxFuzzEntries entries. A later duplicate key wins, as in a
// map literal.
func decodeProfile(raw []byte) *corev1.ConfigMap {
	take := func(n int) string {
		n = min(n, len(raw))
		s := string(raw[:n])
		raw = raw[n:]
		return s
	}
	var data map[string]string
	var binaryData map[string][]byte
	for entries := 0; len(raw) >= 3 && entries < maxFuzzEntries; entries++ {
		binaryEntry := raw[0]&1 == 1
		keyLen, valueLen := int(raw[1]), int(raw[2])
		raw = raw[3:]
		key, value := take(keyLen), take(valueLen)
		if binaryEntry {
			if binaryData == nil {
				binaryData = map[string][]byte{}
			}
			binaryData[key] = []byte(value)
		} else {
			if data == nil {
				data = map[string]string{}
			}
			data[key] = value
		}
	}
	return &corev1.ConfigMap{Data: data, BinaryData: binaryData}
}

// The hash is an annotation value and a status field: 20 lowercase hex
// digits, whatever the profile.
var profileHashFormat = regexp.MustCompile(`^[0-9a-f]{20}$`)

// encodePair writes two profiles as one fuzz input: the length of the
// first's encoding in one byte, then both encodings.
func encodePair(a, b []profileEntry) []byte {
	first := encodeProfile(a...)
	return append(append([]byte{byte(len(first))}, first...), encodeProfile(b...)...)
}

// decodePair splits a fuzz input into two profiles, as encodePair wrote them.
func decodePair(raw []byte) (a, b *corev1.ConfigMap) {
	if len(raw) == 0 {
		return decodeProfile(nil), decodeProfile(nil)
	}
	n := min(int(raw[0]), len(raw)-1)
	return decodeProfile(raw[1 : 1+n]), decodeProfile(raw[1+n:])
}

// sameData reports whether two profiles hold the same data: what the pods
// see, with an empty map the same as none, as the API server stores them.
func sameData(a, b *corev1.ConfigMap) bool {
	return maps.Equal(a.Data, b.Data) && maps.EqualFunc(a.BinaryData, b.BinaryData, func(x, y []byte) bool { return string(x) == string(y) })
}

// FuzzProfileHash checks ProfileHash on any data and binaryData: a short
// lowercase hex string, the same for the same data however built, and
// different for different data. Each input holds two profiles, so the
// engine can also look for a pair that collides.
func FuzzProfileHash(f *testing.F) {
	long := strings.Repeat("x", 253)
	d := func(key, value string) profileEntry { return profileEntry{key: key, value: value} }
	bin := func(key, value string) profileEntry { return profileEntry{binary: true, key: key, value: value} }
	for _, seed := range [][2][]profileEntry{
		// Edge cases, paired with an empty profile.
		{{}, {}},
		{{d("server.cfg", "max_players = 16\n")}, {}},
		{{bin("map.bin", "\x00\x01\x02\xff")}, {}}, // binaryData only
		{{d("a.b", "1"), d("c_d", "2"), d("e-f", "3"), d(".hidden", "")}, {}},
		{{d(long, strings.Repeat("v", 255))}, {}},
		// Pairs that a careless serialisation of two maps confuses.
		{{d("same", "v")}, {bin("same", "v")}},                           // the section
		{{d("ab", "c")}, {d("a", "bc")}},                                 // the key/value boundary
		{{d("a", "\x00")}, {d("a\x01", "")}},                             // a length byte inside a key
		{{d("a", ""), d("c", "\x01dz")}, {d("a", "\x01c"), d("d", "z")}}, // a length byte inside a value
		{{d("a", "b=c")}, {d("a=b", "c")}},                               // a key=value separator
		{{d("a", "b\nc=d")}, {d("a", "b"), d("c", "d")}},                 // a line separator
		{{d("a", ""), d("b", "")}, {d("a\x00b", "")}},                    // a NUL separator
		{{d("", "")}, {}},                                                // an empty entry
		{{d("k", "v"), bin("k2", "w")}, {d("k", "v"), d("k2", "w")}},     // one entry's section
	} {
		f.Add(encodePair(seed[0], seed[1]))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		profile, other := decodePair(raw)
		before := profile.DeepCopy()
		hash := ProfileHash(profile)

		if !profileHashFormat.MatchString(hash) {
			t.Fatalf("hash %q is not 20 lowercase hex digits", hash)
		}
		if errs := apivalidation.ValidateAnnotations(map[string]string{gamesv1.ProfileHashAnnotation: hash}, field.NewPath("annotations")); len(errs) > 0 {
			t.Fatalf("hash %q is not a valid annotation: %v", hash, errs)
		}
		if !equality.Semantic.DeepEqual(profile, before) {
			t.Fatalf("ProfileHash changed its input")
		}

		// The same data hash the same, different data differently.
		if otherHash := ProfileHash(other); (otherHash == hash) != sameData(profile, other) {
			t.Fatalf("hashes %s and %s, same data %v:\n  %#v\n  %#v", hash, otherHash, sameData(profile, other), profile, other)
		}

		// Deterministic, whatever the maps' insertion order, and blind to
		// everything but data and binaryData.
		rebuilt := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"c": "d"}, ResourceVersion: "7"},
			Data:       reinserted(profile.Data),
			BinaryData: reinserted(profile.BinaryData),
		}
		if again := ProfileHash(profile); again != hash {
			t.Fatalf("hash of the same profile changed: %s, then %s", hash, again)
		}
		if got := ProfileHash(rebuilt); got != hash {
			t.Fatalf("hash %s of the same data inserted in reverse order and with other metadata, want %s", got, hash)
		}
		// The API server drops empty maps: a cached profile has nil where a
		// freshly built one may have {}. Both must roll nothing.
		if got := ProfileHash(&corev1.ConfigMap{Data: emptyIfNil(profile.Data), BinaryData: emptyIfNil(profile.BinaryData)}); got != hash {
			t.Fatalf("hash %s with empty maps for nil ones, want %s", got, hash)
		}

		// Every variant holds different data, so must hash differently.
		for what, variant := range profileVariants(profile) {
			if got := ProfileHash(variant); got == hash {
				t.Fatalf("%s: same hash %s for\n  %#v\nand\n  %#v", what, hash, profile, variant)
			}
		}
	})
}

// reinserted copies m, inserting its keys in reverse sorted order.
func reinserted[V any](m map[string]V) map[string]V {
	if m == nil {
		return nil
	}
	keys := slices.Sorted(maps.Keys(m))
	slices.Reverse(keys)
	out := make(map[string]V, len(m))
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}

func emptyIfNil[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}

// profileVariants returns copies of profile whose data differ from it in
// one way each, keyed by what was changed: the ambiguities a careless
// serialisation of two maps would have.
func profileVariants(profile *corev1.ConfigMap) map[string]*corev1.ConfigMap {
	variants := map[string]*corev1.ConfigMap{}
	add := func(what string, change func(*corev1.ConfigMap) bool) {
		v := profile.DeepCopy()
		if v.Data == nil {
			v.Data = map[string]string{}
		}
		if v.BinaryData == nil {
			v.BinaryData = map[string][]byte{}
		}
		if change(v) {
			variants[what] = v
		}
	}
	for _, key := range slices.Sorted(maps.Keys(profile.Data)) {
		value := profile.Data[key]
		add(fmt.Sprintf("data key %q moved to binaryData", key), func(v *corev1.ConfigMap) bool {
			if _, taken := v.BinaryData[key]; taken {
				return false
			}
			delete(v.Data, key)
			v.BinaryData[key] = []byte(value)
			return true
		})
		add(fmt.Sprintf("data key %q copied to binaryData", key), func(v *corev1.ConfigMap) bool {
			if _, taken := v.BinaryData[key]; taken {
				return false
			}
			v.BinaryData[key] = []byte(value)
			return true
		})
		add(fmt.Sprintf("last byte of data key %q moved into its value", key), func(v *corev1.ConfigMap) bool {
			if key == "" {
				return false
			}
			shorter := key[:len(key)-1]
			if _, taken := v.Data[shorter]; taken {
				return false
			}
			delete(v.Data, key)
			v.Data[shorter] = key[len(key)-1:] + value
			return true
		})
		add(fmt.Sprintf("first byte of the value of data key %q moved into the key", key), func(v *corev1.ConfigMap) bool {
			if value == "" {
				return false
			}
			longer := key + value[:1]
			if _, taken := v.Data[longer]; taken {
				return false
			}
			delete(v.Data, key)
			v.Data[longer] = value[1:]
			return true
		})
		add(fmt.Sprintf("a byte appended to the value of data key %q", key), func(v *corev1.ConfigMap) bool {
			v.Data[key] = value + "\x00"
			return true
		})
	}
	for _, key := range slices.Sorted(maps.Keys(profile.BinaryData)) {
		value := profile.BinaryData[key]
		add(fmt.Sprintf("binaryData key %q moved to data", key), func(v *corev1.ConfigMap) bool {
			if _, taken := v.Data[key]; taken {
				return false
			}
			delete(v.BinaryData, key)
			v.Data[key] = string(value)
			return true
		})
		add(fmt.Sprintf("last byte of binaryData key %q moved into its value", key), func(v *corev1.ConfigMap) bool {
			if key == "" {
				return false
			}
			shorter := key[:len(key)-1]
			if _, taken := v.BinaryData[shorter]; taken {
				return false
			}
			delete(v.BinaryData, key)
			v.BinaryData[shorter] = append([]byte(key[len(key)-1:]), value...)
			return true
		})
		add(fmt.Sprintf("a byte removed from the value of binaryData key %q", key), func(v *corev1.ConfigMap) bool {
			if len(value) == 0 {
				return false
			}
			v.BinaryData[key] = value[1:]
			return true
		})
	}
	add("an empty data entry added", func(v *corev1.ConfigMap) bool {
		key := "added"
		for _, taken := v.Data[key]; taken; _, taken = v.Data[key] {
			key += "+"
		}
		v.Data[key] = ""
		return true
	})
	add("an empty binaryData entry added", func(v *corev1.ConfigMap) bool {
		key := "added"
		for _, taken := v.BinaryData[key]; taken; _, taken = v.BinaryData[key] {
			key += "+"
		}
		v.BinaryData[key] = nil
		return true
	})
	return variants
}

// FuzzNewDeployment builds sessions from text the engine mutates, keeps
// those the CRD accepts (fuzzinput.CRDAccepts mirrors its rules), and checks
// the Deployment NewDeployment makes of each.
func FuzzNewDeployment(f *testing.F) {
	name63 := strings.Repeat("a", 63)
	dotted63 := strings.Repeat("a", 30) + "." + strings.Repeat("b", 32)
	profile253 := strings.Repeat("p", 63) + "." + strings.Repeat("q", 63) + "." + strings.Repeat("r", 63) + "." + strings.Repeat("s", 61)
	var maxPorts []string
	for i := range 16 {
		// 15-character names; port numbers from both ends of the range.
		number := 1 + i
		if i%2 == 1 {
			number = 65535 - i
		}
		maxPorts = append(maxPorts, fmt.Sprintf("port-%010d:%d/%s", i, number, []string{"UDP", "TCP", "SCTP", ""}[i%4]))
	}
	seeds := []fuzzinput.Spec{
		{Name: "arena-eu-1", ProfileRef: "arena-standard", Image: "registry.example.com/arena-server:1.4.2", Replicas: 2,
			Ports: "game:7777/UDP,query:27015/TCP", Requests: "cpu=500m,memory=256Mi", Limits: "cpu=1,memory=512Mi"},
		// The shortest names, and the defaults.
		{Name: "a", ProfileRef: "b", Image: "c", Replicas: -1},
		// The shortest port name and the smallest amounts.
		{Name: "b", ProfileRef: "b", Image: "c", Replicas: 1, Ports: "g:1", Requests: "cpu=1m", Limits: "memory=1"},
		// The longest names and the most replicas.
		{Name: name63, ProfileRef: profile253, Image: "arena", Replicas: 100},
		// A dotted name of the same length, a digest, no replicas.
		{Name: dotted63, ProfileRef: "arena.standard-v2", Image: "arena@sha256:" + strings.Repeat("0", 64), Replicas: 0},
		// The most ports, and every protocol on one number.
		{Name: "ports", ProfileRef: "p", Image: "arena", Replicas: 1, Ports: strings.Join(maxPorts, ",")},
		{Name: "protocols", ProfileRef: "p", Image: "arena", Replicas: 1, Ports: "a:1/UDP,b:1/TCP,c:1/SCTP,d:2"},
		{Name: "long-image", ProfileRef: "p", Image: strings.Repeat("i", 512), Replicas: 1},
		{Name: "resources", ProfileRef: "p", Image: "arena", Replicas: 1,
			Requests: "cpu=0,memory=1Gi,ephemeral-storage=1Gi", Limits: "cpu=2,memory=1Gi,ephemeral-storage=2Gi"},
	}
	for _, s := range seeds {
		// A seed the filter below skips would test nothing.
		session, err := s.Session("games")
		if err == nil {
			err = fuzzinput.CRDAccepts(session)
		}
		if err != nil {
			f.Fatalf("seed %+v is not a session the CRD accepts: %v", s, err)
		}
		f.Add(s.Name, s.ProfileRef, s.Image, s.Replicas, s.Ports, s.Requests, s.Limits)
	}
	f.Fuzz(func(t *testing.T, name, profileRef, image string, replicas int32, ports, requests, limits string) {
		checkNewDeployment(t, fuzzinput.Spec{Name: name, ProfileRef: profileRef, Image: image, Replicas: replicas, Ports: ports, Requests: requests, Limits: limits})
	})
}

// FuzzNewDeploymentRandomSpec runs the checks of FuzzNewDeployment on
// fuzzinput.RandomSpec's sessions, drawn towards the CRD's edges. Byte
// mutations of FuzzNewDeployment's text seldom turn a valid port name or
// quantity into another valid but unusual one (a port name of digits only,
// a negative amount); RandomSpec draws them at once. The engine explores
// seeds: breadth, not coverage, is what finds inputs here.
func FuzzNewDeploymentRandomSpec(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		checkNewDeployment(t, fuzzinput.RandomSpec(rand.New(rand.NewPCG(seed, 0))))
	})
}

// checkNewDeployment builds the session spec describes, if the CRD accepts
// it, and checks what NewDeployment makes of it.
func checkNewDeployment(t *testing.T, spec fuzzinput.Spec) {
	written, err := spec.Session("games")
	if errors.Is(err, fuzzinput.ErrNotExpressible) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if fuzzinput.CRDAccepts(written) != nil {
		return // the API server would refuse it; the controller never sees it
	}
	written.UID = types.UID("6f9a1c2e-3b4d-4e5f-8a6b-7c8d9e0f1a2b")
	// What the informer hands the controller: the session as stored.
	stored := fuzzinput.Defaulted(written)
	hash := ProfileHash(&corev1.ConfigMap{Data: map[string]string{"seed": spec.Name}})

	d := NewDeployment(stored, hash)
	if problems := deploymentProblems(stored, hash, d); len(problems) > 0 {
		t.Errorf("NewDeployment built a Deployment the API server or the controllers downstream refuse, "+
			"for a session the CRD accepts: tighten the CRD (and fuzzinput.CRDAccepts with it) or NewDeployment.\n  %s",
			strings.Join(problems, "\n  "))
	}
	if again := NewDeployment(stored, hash); !equality.Semantic.DeepEqual(d, again) {
		t.Errorf("NewDeployment is not deterministic")
	}
	// Objects that bypassed defaulting (fake clients) build the same
	// Deployment, or the controller would see a difference to write.
	if undefaulted := NewDeployment(written, hash); !equality.Semantic.DeepEqual(d, undefaulted) {
		t.Errorf("NewDeployment differs for the session before defaulting")
	}
	if t.Failed() {
		t.Logf("session: %#v", spec)
	}
}

// deploymentProblems checks d, built by NewDeployment for session, against
// what the API server and the controllers downstream require, as far as
// k8s.io/apimachinery can tell without kube-apiserver's own validation
// (k8s.io/kubernetes, which this module must not import). The integration
// test TestDryRunRandomSessions asks the real API server for the rest.
func deploymentProblems(session *gamesv1.GameSession, hash string, d *appsv1.Deployment) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	reportErrs := func(errs field.ErrorList) {
		for _, err := range errs {
			report("%v", err)
		}
	}

	// Metadata: name, namespace, labels, annotations, owner references.
	reportErrs(apivalidation.ValidateObjectMeta(&d.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata")))
	if d.Name != session.Name || d.Namespace != session.Namespace {
		report("Deployment %s/%s for session %s/%s", d.Namespace, d.Name, session.Namespace, session.Name)
	}
	if d.Labels[LabelManagedBy] != ManagedByValue {
		report("Deployment labels %v lack %s=%s: the controller's filtered informer would not see it", d.Labels, LabelManagedBy, ManagedByValue)
	}
	want := metav1.NewControllerRef(session, gamesv1.SchemeGroupVersion.WithKind("GameSession"))
	if len(d.OwnerReferences) != 1 || !equality.Semantic.DeepEqual(d.OwnerReferences[0], *want) || !metav1.IsControlledBy(d, session) {
		report("owner references %+v, want only the session's controller reference %+v", d.OwnerReferences, *want)
	}

	// Replicas and selector.
	if got := ptr.Deref(d.Spec.Replicas, -1); got != ptr.Deref(session.Spec.Replicas, 1) || got < 0 {
		report("replicas %d, session wants %d", got, ptr.Deref(session.Spec.Replicas, 1))
	}
	template := &d.Spec.Template
	templatePath := field.NewPath("spec", "template", "metadata")
	reportErrs(metav1validation.ValidateLabels(template.Labels, templatePath.Child("labels")))
	reportErrs(apivalidation.ValidateAnnotations(template.Annotations, templatePath.Child("annotations")))
	reportErrs(metav1validation.ValidateLabelSelector(d.Spec.Selector, metav1validation.LabelSelectorValidationOptions{}, field.NewPath("spec", "selector")))
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	switch {
	case err != nil:
		report("selector: %v", err)
	case selector.Empty():
		report("empty selector: it would select every pod in the namespace")
	case !selector.Matches(labels.Set(template.Labels)):
		report("selector %s does not match the template labels %v", selector, template.Labels)
	default:
		// A sibling session's pods are not this Deployment's.
		sibling := session.DeepCopy()
		sibling.Name = "z" + session.Name[1:]
		if sibling.Name == session.Name {
			sibling.Name = "y" + session.Name[1:]
		}
		if other := NewDeployment(sibling, hash); selector.Matches(labels.Set(other.Spec.Template.Labels)) {
			report("selector %s also selects the pods of session %s", selector, sibling.Name)
		}
	}
	if got := template.Annotations[gamesv1.ProfileHashAnnotation]; got != hash {
		report("template annotation %s=%q, want %q", gamesv1.ProfileHashAnnotation, got, hash)
	}

	// The pod spec.
	podSpec := &template.Spec
	if ptr.Deref(podSpec.AutomountServiceAccountToken, true) {
		report("the pods mount a service account token")
	}
	volumes := map[string]*corev1.Volume{}
	for i := range podSpec.Volumes {
		v := &podSpec.Volumes[i]
		for _, msg := range validation.IsDNS1123Label(v.Name) {
			report("volume name %q: %s", v.Name, msg)
		}
		if volumes[v.Name] != nil {
			report("volume %q twice", v.Name)
		}
		volumes[v.Name] = v
	}
	profile := volumes[profileVolumeName]
	if revision := RevisionName(session.Spec.ProfileRef, hash); profile == nil || profile.ConfigMap == nil || profile.ConfigMap.Name != revision {
		report("no volume %q of ConfigMap %q: %+v", profileVolumeName, revision, podSpec.Volumes)
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(profile.ConfigMap.Name) {
			report("profile volume ConfigMap name %q: %s", profile.ConfigMap.Name, msg)
		}
	}
	if len(podSpec.Containers) != 1 {
		report("%d containers, want 1", len(podSpec.Containers))
		return problems
	}
	c := &podSpec.Containers[0]
	for _, msg := range validation.IsDNS1123Label(c.Name) {
		report("container name %q: %s", c.Name, msg)
	}
	if c.Image != session.Spec.Image {
		report("image %q, want %q", c.Image, session.Spec.Image)
	}
	// Deployment validation lets this through, but the ReplicaSet's pods
	// are refused with it: the game servers would never start.
	if c.Image == "" || strings.TrimSpace(c.Image) != c.Image {
		report("image %q is empty or has leading or trailing whitespace: every pod would be refused", c.Image)
	}
	mounts := 0
	for _, m := range c.VolumeMounts {
		if volumes[m.Name] == nil {
			report("volume mount %q names no volume", m.Name)
		}
		if !path.IsAbs(m.MountPath) || strings.Contains(m.MountPath, "..") {
			report("mount path %q is not absolute and clean", m.MountPath)
		}
		if m.Name == profileVolumeName {
			mounts++
			if m.MountPath != ProfileMountPath || !m.ReadOnly || m.SubPath != "" {
				report("profile mount %+v, want read-only at %s", m, ProfileMountPath)
			}
		}
	}
	if mounts != 1 {
		report("the profile volume is mounted %d times, want once", mounts)
	}
	problems = append(problems, portProblems(session, c.Ports)...)
	problems = append(problems, resourceProblems(c.Resources)...)
	return problems
}

func portProblems(session *gamesv1.GameSession, ports []corev1.ContainerPort) []string {
	var problems []string
	if len(ports) != len(session.Spec.Ports) {
		problems = append(problems, fmt.Sprintf("%d container ports for %d session ports", len(ports), len(session.Spec.Ports)))
	}
	names := map[string]bool{}
	type numberProtocol struct {
		number   int32
		protocol corev1.Protocol
	}
	pairs := map[numberProtocol]bool{}
	for i, p := range ports {
		if i < len(session.Spec.Ports) {
			if sp := session.Spec.Ports[i]; p.Name != sp.Name || p.ContainerPort != sp.ContainerPort || p.Protocol != sp.Protocol {
				problems = append(problems, fmt.Sprintf("container port %+v for session port %+v", p, sp))
			}
		}
		for _, msg := range validation.IsValidPortName(p.Name) {
			problems = append(problems, fmt.Sprintf("port name %q: %s", p.Name, msg))
		}
		for _, msg := range validation.IsValidPortNum(int(p.ContainerPort)) {
			problems = append(problems, fmt.Sprintf("port %s number %d: %s", p.Name, p.ContainerPort, msg))
		}
		if p.Protocol != corev1.ProtocolUDP && p.Protocol != corev1.ProtocolTCP && p.Protocol != corev1.ProtocolSCTP {
			problems = append(problems, fmt.Sprintf("port %s protocol %q", p.Name, p.Protocol))
		}
		if names[p.Name] {
			problems = append(problems, fmt.Sprintf("port name %q twice", p.Name))
		}
		names[p.Name] = true
		if key := (numberProtocol{p.ContainerPort, p.Protocol}); pairs[key] {
			problems = append(problems, fmt.Sprintf("port %d/%s twice", key.number, key.protocol))
		} else {
			pairs[key] = true
		}
	}
	return problems
}

// standardContainerResources are the resource names without a domain that
// a container may request; every other name needs a domain prefix.
var standardContainerResources = []string{"cpu", "memory", "ephemeral-storage"}

// resourceProblems checks the container's resources the way Pod validation
// does, in its broad lines: names qualified, and standard unless
// domain-prefixed; no negative amount; no request above its limit.
func resourceProblems(r corev1.ResourceRequirements) []string {
	var problems []string
	for what, list := range map[string]corev1.ResourceList{"requests": r.Requests, "limits": r.Limits} {
		for name, q := range list {
			n := string(name)
			for _, msg := range validation.IsQualifiedName(n) {
				problems = append(problems, fmt.Sprintf("resources.%s name %q: %s", what, n, msg))
			}
			if !strings.Contains(n, "/") && !slices.Contains(standardContainerResources, n) && !strings.HasPrefix(n, "hugepages-") {
				problems = append(problems, fmt.Sprintf("resources.%s name %q: not a standard container resource, and no domain prefix", what, n))
			}
			if q.Sign() < 0 {
				problems = append(problems, fmt.Sprintf("resources.%s[%s] = %s: negative", what, n, q.String()))
			}
		}
	}
	for name, request := range r.Requests {
		if limit, ok := r.Limits[name]; ok && request.Cmp(limit) > 0 {
			problems = append(problems, fmt.Sprintf("resources.requests[%s] = %s above its limit %s", name, request.String(), limit.String()))
		}
	}
	slices.Sort(problems) // map order must not change the report
	return problems
}
