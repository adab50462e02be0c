package fuzzinput

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// Spec is a GameSession in a flat, textual form: a fuzz engine can mutate
// it, and a seed states an edge case readably.
//
//	Ports:            "game:7777/UDP,query:27015" (no protocol: the CRD defaults it)
//	Requests, Limits: "cpu=500m,memory=256Mi"
//	Replicas:         below 0 leaves spec.replicas unset
type Spec struct {
	Name, ProfileRef, Image string
	Replicas                int32
	Ports                   string
	Requests, Limits        string
}

// ErrNotExpressible is wrapped by Session when the text has no GameSession
// form at all: a port number that is not a number, a quantity
// resource.Quantity cannot parse. Such input never reaches the controller as
// an object, so fuzz targets skip it.
var ErrNotExpressible = errors.New("not expressible as a GameSession")

// Session returns the GameSession the spec describes, as a user would write
// it: nothing defaulted. Whether the CRD accepts it is CRDAccepts' business.
func (s Spec) Session(namespace string) (*gamesv1.GameSession, error) {
	session := &gamesv1.GameSession{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: namespace},
		Spec: gamesv1.GameSessionSpec{
			ProfileRef: s.ProfileRef,
			Image:      s.Image,
		},
	}
	if s.Replicas >= 0 {
		session.Spec.Replicas = ptr.To(s.Replicas)
	}
	var err error
	if session.Spec.Ports, err = parsePorts(s.Ports); err != nil {
		return nil, err
	}
	if session.Spec.Resources.Requests, err = parseResources(s.Requests); err != nil {
		return nil, err
	}
	if session.Spec.Resources.Limits, err = parseResources(s.Limits); err != nil {
		return nil, err
	}
	return session, nil
}

func parsePorts(text string) ([]gamesv1.GameServerPort, error) {
	if text == "" {
		return nil, nil
	}
	var ports []gamesv1.GameServerPort
	for _, item := range strings.Split(text, ",") {
		name, rest, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("port %q has no ':': %w", item, ErrNotExpressible)
		}
		number, protocol, _ := strings.Cut(rest, "/")
		n, err := strconv.ParseInt(number, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("port %q: %v: %w", item, err, ErrNotExpressible)
		}
		ports = append(ports, gamesv1.GameServerPort{Name: name, ContainerPort: int32(n), Protocol: corev1.Protocol(protocol)})
	}
	return ports, nil
}

func parseResources(text string) (corev1.ResourceList, error) {
	if text == "" {
		return nil, nil
	}
	list := corev1.ResourceList{}
	for _, item := range strings.Split(text, ",") {
		name, value, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("resource %q has no '=': %w", item, ErrNotExpressible)
		}
		if _, dup := list[corev1.ResourceName(name)]; dup {
			// A JSON object cannot hold the key twice.
			return nil, fmt.Errorf("resource %q twice: %w", name, ErrNotExpressible)
		}
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return nil, fmt.Errorf("resource %q: %v: %w", item, err, ErrNotExpressible)
		}
		list[corev1.ResourceName(name)] = q
	}
	return list, nil
}

// The CRD's rules, copied from the markers in pkg/apis/games/v1/types.go
// (artifacts/crd/ holds the generated schema). Keep them in step: the
// integration test TestDryRunRandomSessions fails when they drift apart.
const (
	maxNameLength       = 63  // CEL rule on metadata.name
	maxProfileRefLength = 253 // of the name; a namespace before it adds up to 64
	maxNamespaceLength  = 63
	maxImageLength      = 512
	maxReplicas         = 100
	maxPorts            = 16
	maxPortNameLength   = 15
	maxResources        = 8 // maxProperties of requests and of limits
)

var (
	profileRefPattern = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	// The CEL rule !self.matches('\\s') runs RE2, as Go's regexp does: \s is
	// [\t\n\f\r ] only, not every Unicode space.
	whitespace      = regexp.MustCompile(`\s`)
	imageReference  = regexp.MustCompile(gamesv1.ImageReferencePattern)
	portNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	// The CEL rule self.matches('[a-z]') on a port name.
	letter = regexp.MustCompile(`[a-z]`)
	// The pattern controller-gen gives every resource.Quantity.
	quantityPattern = regexp.MustCompile(`^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`)
	protocols       = map[corev1.Protocol]bool{"": true, corev1.ProtocolUDP: true, corev1.ProtocolTCP: true, corev1.ProtocolSCTP: true}
	// The CEL rule self.all(k, k in ['cpu', 'memory', 'ephemeral-storage'])
	// on requests and on limits.
	crdResourceNames = map[corev1.ResourceName]bool{corev1.ResourceCPU: true, corev1.ResourceMemory: true, corev1.ResourceEphemeralStorage: true}
)

// CRDAccepts mirrors the validation the API server applies to a GameSession
// create: the GameSession CRD's OpenAPI schema and CEL rules, and the name
// rule every custom resource gets. It returns nil when the API server would
// accept the session, else the first rule it breaks.
//
// It works on the session as written, before defaulting: the protocol
// default (UDP) counts in the port uniqueness rule, as the API server
// defaults before it validates. String lengths are counted in characters,
// as OpenAPI's maxLength is.
func CRDAccepts(s *gamesv1.GameSession) error {
	if msgs := validation.IsDNS1123Subdomain(s.Name); len(msgs) > 0 {
		return fmt.Errorf("metadata.name %q: %s", s.Name, strings.Join(msgs, "; "))
	}
	if len(s.Name) > maxNameLength {
		return fmt.Errorf("metadata.name: %d characters, more than %d", len(s.Name), maxNameLength)
	}
	spec := &s.Spec
	// A string that is not UTF-8 does not survive JSON: the API server
	// would see another string than the controller is given here.
	for _, str := range []string{spec.ProfileRef, spec.Image} {
		if !utf8.ValidString(str) {
			return fmt.Errorf("%q is not UTF-8", str)
		}
	}
	namespace, name, crossNamespace := strings.Cut(spec.ProfileRef, "/")
	if !crossNamespace {
		namespace, name = "", spec.ProfileRef
	}
	if n := utf8.RuneCountInString(spec.ProfileRef); n < 1 || n > maxProfileRefLength+1+maxNamespaceLength ||
		!profileRefPattern.MatchString(spec.ProfileRef) || len(name) > maxProfileRefLength || len(namespace) > maxNamespaceLength {
		return fmt.Errorf("spec.profileRef %q: not a ConfigMap name of 1..%d characters, optionally after a namespace and a slash", spec.ProfileRef, maxProfileRefLength)
	}
	if n := utf8.RuneCountInString(spec.Image); n < 1 || n > maxImageLength {
		return fmt.Errorf("spec.image: %d characters, want 1..%d", n, maxImageLength)
	}
	if whitespace.MatchString(spec.Image) {
		return fmt.Errorf("spec.image %q contains whitespace", spec.Image)
	}
	// The CEL rule self == self.trim(): CEL's trim() is strings.TrimSpace,
	// every Unicode space (U+00A0, U+3000, \v, ...), not only RE2's \s.
	if strings.TrimSpace(spec.Image) != spec.Image {
		return fmt.Errorf("spec.image %q begins or ends with whitespace", spec.Image)
	}
	if !imageReference.MatchString(spec.Image) {
		return fmt.Errorf("spec.image %q is not an image reference", spec.Image)
	}
	if r := spec.Replicas; r != nil && (*r < 0 || *r > maxReplicas) {
		return fmt.Errorf("spec.replicas %d: want 0..%d", *r, maxReplicas)
	}
	if err := portsAccepted(spec.Ports); err != nil {
		return err
	}
	for _, field := range []struct {
		what string
		list corev1.ResourceList
	}{{"requests", spec.Resources.Requests}, {"limits", spec.Resources.Limits}} {
		what, list := field.what, field.list
		if len(list) > maxResources {
			return fmt.Errorf("spec.resources.%s: %d entries, more than %d", what, len(list), maxResources)
		}
		for name, q := range list {
			if !utf8.ValidString(string(name)) {
				return fmt.Errorf("spec.resources.%s: key %q is not UTF-8", what, name)
			}
			// The API server sees the quantity as the client serialises it.
			if !quantityPattern.MatchString(q.String()) {
				return fmt.Errorf("spec.resources.%s[%s]: %q does not match the quantity pattern", what, name, q.String())
			}
		}
		// The CEL rules on requests and on limits, in their order.
		for name := range list {
			if !crdResourceNames[name] {
				return fmt.Errorf("spec.resources.%s: resource %q is not cpu, memory or ephemeral-storage", what, name)
			}
		}
		for name, q := range list {
			// isQuantity(string(self[k])) runs resource.ParseQuantity.
			if _, err := resource.ParseQuantity(q.String()); err != nil {
				return fmt.Errorf("spec.resources.%s[%s]: %q is not a valid quantity: %v", what, name, q.String(), err)
			}
		}
		for name, q := range list {
			if parsed := resource.MustParse(q.String()); parsed.Sign() < 0 {
				return fmt.Errorf("spec.resources.%s[%s]: %s is negative", what, name, q.String())
			}
		}
	}
	// The CEL rule on spec.resources: requests[k] <= limits[k]
	// (quantity(...).compareTo, which is resource.Quantity.Cmp).
	for name, request := range spec.Resources.Requests {
		limit, ok := spec.Resources.Limits[name]
		if !ok {
			continue
		}
		r, l := resource.MustParse(request.String()), resource.MustParse(limit.String())
		if r.Cmp(l) > 0 {
			return fmt.Errorf("spec.resources: request %s=%s is more than the limit %s", name, request.String(), limit.String())
		}
	}
	return nil
}

func portsAccepted(ports []gamesv1.GameServerPort) error {
	if len(ports) > maxPorts {
		return fmt.Errorf("spec.ports: %d items, more than %d", len(ports), maxPorts)
	}
	names := map[string]bool{}
	type portKey struct {
		number   int32
		protocol corev1.Protocol
	}
	numbers := map[portKey]bool{}
	for _, p := range ports {
		if !utf8.ValidString(p.Name) || len(p.Name) < 1 || len(p.Name) > maxPortNameLength || !portNamePattern.MatchString(p.Name) {
			return fmt.Errorf("spec.ports name %q: want 1..%d of [-a-z0-9], a letter or digit at each end", p.Name, maxPortNameLength)
		}
		// The CEL rules self.matches('[a-z]') and !self.contains('--').
		if !letter.MatchString(p.Name) {
			return fmt.Errorf("spec.ports name %q: has no letter", p.Name)
		}
		if strings.Contains(p.Name, "--") {
			return fmt.Errorf("spec.ports name %q: contains '--'", p.Name)
		}
		if p.ContainerPort < 1 || p.ContainerPort > 65535 {
			return fmt.Errorf("spec.ports %s: containerPort %d out of 1..65535", p.Name, p.ContainerPort)
		}
		if !protocols[p.Protocol] {
			return fmt.Errorf("spec.ports %s: protocol %q not UDP, TCP or SCTP", p.Name, p.Protocol)
		}
		// listType=map with listMapKey=name.
		if names[p.Name] {
			return fmt.Errorf("spec.ports: name %q twice", p.Name)
		}
		names[p.Name] = true
		key := portKey{p.ContainerPort, p.Protocol}
		if key.protocol == "" {
			key.protocol = corev1.ProtocolUDP
		}
		if numbers[key] {
			return fmt.Errorf("spec.ports: %d/%s twice", key.number, key.protocol)
		}
		numbers[key] = true
	}
	return nil
}

// Defaulted returns a copy of the session with the CRD's defaults applied,
// as the API server stores it and the controller's informer hands it over.
func Defaulted(s *gamesv1.GameSession) *gamesv1.GameSession {
	d := s.DeepCopy()
	if d.Spec.Replicas == nil {
		d.Spec.Replicas = ptr.To[int32](1)
	}
	for i := range d.Spec.Ports {
		if d.Spec.Ports[i].Protocol == "" {
			d.Spec.Ports[i].Protocol = corev1.ProtocolUDP
		}
	}
	return d
}
