package integration

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"

	"github.com/example/gamesession-controller/internal/fuzzinput"
	"github.com/example/gamesession-controller/pkg/controller"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
)

// dryRunSeedEnv reruns TestDryRunRandomSessions with the sample of a
// failed run.
const dryRunSeedEnv = "GAMESESSION_DRYRUN_SEED"

// TestDryRunRandomSessions asks the real API server, with server-side dry
// runs that store nothing, about a random sample of sessions:
//   - the CRD accepts exactly the sessions fuzzinput.CRDAccepts accepts, so
//     the fuzz targets in pkg/controller explore what users can write;
//   - for every accepted session, the Deployment controller.NewDeployment
//     builds is accepted, and so is a Pod of its template, which is what the
//     ReplicaSet controller will create. A session the CRD takes but no
//     game server can run from is a hole in the CRD's validation.
//
// Each run draws a new sample; the seed is logged, and a failure says how to
// rerun it.
func TestDryRunRandomSessions(t *testing.T) {
	e := newEnv(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(dryRunSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", dryRunSeedEnv, s, err)
		}
	}
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))

	// A Pod's admission looks its ServiceAccount up; kube-controller-manager
	// creates the namespace's default one shortly after the namespace.
	e.eventually("the default ServiceAccount", func() (bool, error) {
		_, err := e.kube.CoreV1().ServiceAccounts(e.ns).Get(e.ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})

	// Warnings are not refusals, but the user sees them on every apply:
	// collect them for the log instead of letting client-go print each.
	warnings := &warningLog{counts: map[string]int{}}
	cfg := adminConfig()
	cfg.WarningHandler = warnings
	kube, game := kubernetes.NewForConfigOrDie(cfg), clientset.NewForConfigOrDie(cfg)

	const sample = 300
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	failures := newFailureLog()
	accepted, refused := 0, 0
	for accepted < sample {
		spec := fuzzinput.RandomSpec(r)
		session, err := spec.Session(e.ns)
		if err != nil {
			t.Fatalf("seed %d: RandomSpec made %#v, which has no session: %v", seed, spec, err)
		}
		mirror := fuzzinput.CRDAccepts(session)
		created, err := game.GamesV1().GameSessions(e.ns).Create(e.ctx, session, dryRun)
		switch {
		case mirror == nil && err != nil:
			failures.add("the CRD refuses a session CRDAccepts accepts", spec, err)
			continue
		case mirror != nil && err == nil:
			failures.add("the CRD accepts a session CRDAccepts refuses", spec, mirror)
			continue
		case mirror != nil:
			if !apierrors.IsInvalid(err) {
				t.Fatalf("seed %d: creating %#v: %v, want an Invalid error", seed, spec, err)
			}
			refused++
			continue
		}
		accepted++

		// The dry run returns the session as stored: defaulted, with a UID.
		if created.UID == "" {
			created.UID = uuid.NewUUID()
		}
		hash := controller.ProfileHash(&corev1.ConfigMap{Data: map[string]string{"seed": strconv.Itoa(accepted)}})
		d := controller.NewDeployment(created, hash)
		if _, err := kube.AppsV1().Deployments(e.ns).Create(e.ctx, d, dryRun); err != nil {
			failures.add("the Deployment is refused", spec, err)
			continue
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				GenerateName: d.Name + "-",
				Labels:       d.Spec.Template.Labels,
				Annotations:  d.Spec.Template.Annotations,
			},
			Spec: d.Spec.Template.Spec,
		}
		if _, err := kube.CoreV1().Pods(e.ns).Create(e.ctx, pod, dryRun); err != nil {
			failures.add("the Deployment is accepted but its pods are refused", spec, err)
		}
	}
	t.Logf("seed %d: %d sessions accepted, %d refused by the CRD as CRDAccepts predicted; API server warnings:\n%s", seed, accepted, refused, warnings)
	if failures.total > 0 {
		t.Errorf("seed %d (rerun: %s=%d go test -run TestDryRunRandomSessions ./test/integration/): %d failures, by cause:\n%s",
			seed, dryRunSeedEnv, seed, failures.total, failures)
	}
}

// failureLog counts failures by cause, each with one example, so that
// one hole in the CRD does not bury the others under hundreds of lines. A
// session refused for several reasons counts under each.
type failureLog struct {
	total    int
	counts   map[string]int
	examples map[string]string
}

func newFailureLog() *failureLog {
	return &failureLog{counts: map[string]int{}, examples: map[string]string{}}
}

var (
	listIndex    = regexp.MustCompile(`\[[^\]]*\]`)
	invalidValue = regexp.MustCompile(`^Invalid value: ("(?:[^"\\]|\\.)*"|[^:"]*): `)
	quotedValue  = regexp.MustCompile(`"[^"]*"`)
	// Numbers and quantities, with their units (1, -3, 1.5, 1e3, 100Mi).
	quantity = regexp.MustCompile(`-?\b[0-9][0-9.]*([eE][-+]?[0-9]+)?[A-Za-z]*`)
)

// withoutValues turns a message into its kind: quoted values and
// quantities replaced, so that messages about different values compare equal.
func withoutValues(message string) string {
	return quantity.ReplaceAllString(quotedValue.ReplaceAllString(invalidValue.ReplaceAllString(message, ""), "…"), "Q")
}

func (l *failureLog) add(what string, spec fuzzinput.Spec, err error) {
	l.total++
	kinds := []string{what}
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil && len(status.Status().Details.Causes) > 0 {
		// By field and message, without the values in them.
		kinds = nil
		for _, c := range status.Status().Details.Causes {
			kinds = append(kinds, fmt.Sprintf("%s: %s: %s", what, listIndex.ReplaceAllString(c.Field, "[*]"), withoutValues(c.Message)))
		}
		slices.Sort(kinds)
		kinds = slices.Compact(kinds)
	}
	for _, kind := range kinds {
		l.counts[kind]++
		if _, seen := l.examples[kind]; !seen {
			l.examples[kind] = fmt.Sprintf("%s\n      %v", shortSpec(spec), err)
		}
	}
}

func (l *failureLog) String() string {
	var b strings.Builder
	kinds := slices.Collect(maps.Keys(l.counts))
	slices.SortFunc(kinds, func(a, b string) int { return l.counts[b] - l.counts[a] })
	for _, kind := range kinds {
		fmt.Fprintf(&b, "  %d× %s\n    e.g. %s\n", l.counts[kind], kind, l.examples[kind])
	}
	return b.String()
}

// shortSpec prints a spec as Go, with long strings cut short: the seed
// reproduces the whole of it.
func shortSpec(s fuzzinput.Spec) string {
	short := func(v string) string {
		if len(v) <= 80 {
			return strconv.Quote(v)
		}
		return fmt.Sprintf("%q…(%d bytes)", v[:60], len(v))
	}
	return fmt.Sprintf("{Name: %s, ProfileRef: %s, Image: %s, Replicas: %d, Ports: %s, Requests: %s, Limits: %s}",
		short(s.Name), short(s.ProfileRef), short(s.Image), s.Replicas, short(s.Ports), short(s.Requests), short(s.Limits))
}

// warningLog counts the API server's warnings by kind.
type warningLog struct {
	mu     sync.Mutex
	counts map[string]int
}

func (w *warningLog) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts[withoutValues(text)]++
}

func (w *warningLog) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, kind := range slices.Sorted(maps.Keys(w.counts)) {
		fmt.Fprintf(&b, "  %d× %s\n", w.counts[kind], kind)
	}
	return b.String()
}
