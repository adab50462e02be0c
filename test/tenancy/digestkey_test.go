package tenancy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	"github.com/example/gamesession-controller/internal/testutil"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
)

// keySessions are the sessions of the digest key tests, by the labelled
// Secrets each reads: one, two, or none.
var keySessions = map[string][]string{
	"reads-alpha":      {"alpha"},
	"reads-alpha-beta": {"alpha", "beta"},
	"reads-beta":       {"beta"},
	"reads-beta-gamma": {"beta", "gamma"},
	"reads-gamma":      {"gamma"},
	"reads-none":       nil,
}

// keySecretName is the digest key's Secret, in the controller's own
// namespace.
var keySecretName = app.NewOptions().SecretDigestKey

const keyStateMetric = "gamesession_controller_secret_digest_key"

// replica is a controller run in-process, its health and metrics served on
// loopback ports of its own so the test can probe and scrape it.
type replica struct {
	*runningController
	name            string
	health, metrics string
}

// startReplica runs a controller with cfg's identity; with leaderElect, it
// leads only while it holds the Lease of the controller's own namespace.
func (e *env) startReplica(name string, cfg *rest.Config, leaderElect bool) *replica {
	e.t.Helper()
	r := &replica{name: name, health: testutil.FreeLoopbackAddr(e.t), metrics: testutil.FreeLoopbackAddr(e.t)}
	r.runningController = e.startController(cfg, func(o *app.Options) {
		o.HealthProbeBindAddress, o.MetricsBindAddress = r.health, r.metrics
		if leaderElect {
			o.LeaderElect = true
			o.LeaderElectionNamespace = e.ownNamespace
		}
	})
	return r
}

// stop cancels the replica and waits for Run to return, as a pod's
// termination does; with leader election, it releases the Lease.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	if err := <-r.done; err != nil {
		t.Errorf("%s returned an error: %v", r.name, err)
	}
	r.done <- nil // for startController's cleanup
}

func (r *replica) readyz(ctx context.Context) (int, string) {
	return testutil.HTTPGet(ctx, r.health, "/readyz")
}

func (r *replica) scrape(ctx context.Context) testutil.PromText {
	_, body := testutil.HTTPGet(ctx, r.metrics, "/metrics")
	return testutil.PromText(body)
}

// leads reports whether the replica runs the controller: only then has it
// read the key and made the series of its Secret's state.
func (r *replica) leads(ctx context.Context) bool {
	_, found := r.scrape(ctx).Sum(keyStateMetric, nil)
	return found
}

// keyState returns the replica's gamesession_controller_secret_digest_key
// state whose value is 1, "" if none or several.
func (r *replica) keyState(ctx context.Context) string {
	m := r.scrape(ctx)
	state := ""
	for _, s := range []string{"present", "missing", "replaced"} {
		if v, _ := m.Sum(keyStateMetric, map[string]string{"state": s}); v == 1 {
			if state != "" {
				return ""
			}
			state = s
		}
	}
	return state
}

func (r *replica) adopted(ctx context.Context) float64 {
	v, _ := r.scrape(ctx).Sum("gamesession_controller_secret_digests_adopted_total", nil)
	return v
}

// broken is a condition that no wait can mend: measure fails at once.
type broken struct{ error }

// measure polls cond until it holds, within bound, and logs and returns
// how long it took. A broken error fails the test at once.
func (e *env) measure(what string, bound time.Duration, cond func() (bool, error)) time.Duration {
	e.t.Helper()
	start := time.Now()
	var last error
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, bound, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		if b := (broken{}); errors.As(err, &b) {
			return false, err
		}
		return ok, nil
	})
	if b := (broken{}); errors.As(err, &b) {
		e.t.Fatalf("while waiting for %s: %v", what, b.error)
	}
	if err != nil {
		e.t.Fatalf("timed out after %s waiting for %s (last: %v)", bound, what, last)
	}
	took := time.Since(start)
	e.t.Logf("%s: %s", what, took.Round(10*time.Millisecond))
	return took
}

// digestKey reads the digest key's Secret, as an admin would; nil data if
// it does not exist.
func (e *env) digestKey() (map[string][]byte, error) {
	s, err := e.kube.CoreV1().Secrets(e.ownNamespace).Get(e.ctx, keySecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.Data, nil
}

// putDigestKey deletes the key Secret and creates it again with data: how
// an admin rotates the key, or drops the previous one.
func (e *env) putDigestKey(data map[string][]byte) {
	e.t.Helper()
	secrets := e.kube.CoreV1().Secrets(e.ownNamespace)
	if err := secrets.Delete(e.ctx, keySecretName, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("delete the key Secret: %v", err)
	}
	if _, err := secrets.Create(e.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: keySecretName, Namespace: e.ownNamespace},
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create the key Secret: %v", err)
	}
}

// keyEvent returns the Event of that reason on the key Secret, nil if none.
func (e *env) keyEvent(reason string) (*corev1.Event, error) {
	events, err := e.kube.CoreV1().Events(e.ownNamespace).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range events.Items {
		ev := &events.Items[i]
		o := ev.InvolvedObject
		if ev.Reason == reason && o.Kind == "Secret" && o.Namespace == e.ownNamespace && o.Name == keySecretName {
			return ev, nil
		}
	}
	return nil, nil
}

// keyFixture is the sessions of keySessions in one namespace.
type keyFixture struct {
	e  *env
	ns string
	// barrierNS has a session created after each restart: the controller
	// queues it behind its first pass over every session (it is cluster
	// wide), so once its Deployment exists that pass is done.
	barrierNS string
	barriers  int
}

func (e *env) keyFixture() *keyFixture {
	e.t.Helper()
	// Registered before the namespaces, so it runs after their deletion:
	// the next test's cluster-wide controller, under another key, would
	// take over these digests too, and count them.
	var namespaces []string
	e.t.Cleanup(func() { waitNamespacesGone(e.t, e, namespaces) })
	f := &keyFixture{e: e, ns: e.namespace(), barrierNS: e.namespace()}
	namespaces = []string{f.ns, f.barrierNS}
	for _, ns := range namespaces {
		e.createProfile(ns, "arena", map[string]string{"server.cfg": "max_players=16"})
	}
	for _, s := range []string{"alpha", "beta", "gamma"} {
		e.putSecret(f.ns, s, true, []byte(s+"-first"))
	}
	for _, name := range slices.Sorted(maps.Keys(keySessions)) {
		if secrets := keySessions[name]; len(secrets) > 0 {
			e.createSessionReading(f.ns, name, "arena", secrets...)
		} else {
			e.createSession(f.ns, name, "arena")
		}
	}
	return f
}

// readers are the sessions that read the Secret.
func readers(secret string) []string {
	var out []string
	for name, secrets := range keySessions {
		if slices.Contains(secrets, secret) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// running says whether every session is Ready, its Deployment complete and
// its one pod running.
func (f *keyFixture) running() (bool, error) {
	for name := range keySessions {
		s, err := f.e.game.GamesV1().GameSessions(f.ns).Get(f.e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !meta.IsStatusConditionTrue(s.Status.Conditions, gamesv1.ConditionReady) {
			return false, fmt.Errorf("session %s not Ready", name)
		}
		d, err := f.e.kube.AppsV1().Deployments(f.ns).Get(f.e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !rolledOut(d) {
			return false, fmt.Errorf("Deployment %s not complete", name)
		}
		pods, err := f.pods(name)
		if err != nil {
			return false, err
		}
		if len(pods) != 1 || pods[0].Status.Phase != corev1.PodRunning || pods[0].DeletionTimestamp != nil {
			return false, fmt.Errorf("session %s has %d pods, not one running", name, len(pods))
		}
	}
	return true, nil
}

func (f *keyFixture) pods(session string) ([]corev1.Pod, error) {
	list, err := f.e.kube.CoreV1().Pods(f.ns).List(f.e.ctx, metav1.ListOptions{LabelSelector: controller.LabelInstance + "=" + session})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// deploymentState is what a restart of game servers would change.
type deploymentState struct {
	generation  int64
	template    corev1.PodTemplateSpec
	keyRecord   string // gamesv1.SecretsKeyLabel, on the Deployment
	replicaSets []string
	pod         types.UID
}

func (f *keyFixture) snapshot() map[string]deploymentState {
	f.e.t.Helper()
	out := map[string]deploymentState{}
	for name := range keySessions {
		d, err := f.e.kube.AppsV1().Deployments(f.ns).Get(f.e.ctx, name, metav1.GetOptions{})
		if err != nil {
			f.e.t.Fatal(err)
		}
		sets, err := f.replicaSets(name)
		if err != nil {
			f.e.t.Fatal(err)
		}
		pods, err := f.pods(name)
		if err != nil {
			f.e.t.Fatal(err)
		}
		if len(pods) != 1 {
			f.e.t.Fatalf("session %s has %d pods", name, len(pods))
		}
		out[name] = deploymentState{generation: d.Generation, template: *d.Spec.Template.DeepCopy(),
			keyRecord: d.Labels[gamesv1.SecretsKeyLabel], replicaSets: sets, pod: pods[0].UID}
	}
	return out
}

func (f *keyFixture) replicaSets(session string) ([]string, error) {
	list, err := f.e.kube.AppsV1().ReplicaSets(f.ns).List(f.e.ctx, metav1.ListOptions{LabelSelector: controller.LabelInstance + "=" + session})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, rs := range list.Items {
		names = append(names, rs.Name)
	}
	slices.Sort(names)
	return names, nil
}

// kept returns a broken error if a session not in moved has a Deployment
// whose pod template or ReplicaSets differ from base: its game servers
// restarted, or are about to.
func (f *keyFixture) kept(base map[string]deploymentState, moved ...string) error {
	for name, was := range base {
		if slices.Contains(moved, name) {
			continue
		}
		d, err := f.e.kube.AppsV1().Deployments(f.ns).Get(f.e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		// The key is recorded in a label, which leaves the generation as
		// it is (an annotation would bump it).
		if !equality.Semantic.DeepEqual(d.Spec.Template, was.template) || d.Generation != was.generation {
			return broken{fmt.Errorf("the Deployment %s/%s changed its pod template (generation %d -> %d, Secret digest %q -> %q)",
				f.ns, name, was.generation, d.Generation, was.template.Annotations[gamesv1.SecretsHashAnnotation],
				d.Spec.Template.Annotations[gamesv1.SecretsHashAnnotation])}
		}
		sets, err := f.replicaSets(name)
		if err != nil {
			return err
		}
		if !slices.Equal(sets, was.replicaSets) {
			return broken{fmt.Errorf("the Deployment %s/%s has ReplicaSets %v, had %v", f.ns, name, sets, was.replicaSets)}
		}
	}
	return nil
}

// expectedDigest is the Secret digest of the session's Secrets under key,
// as the controller makes it: the informer's transform (exported) digests
// each Secret, and the set's digest is inputs.go's hash of names and
// digests. It reads the Secrets as they are now.
func (f *keyFixture) expectedDigest(key []byte, session string) (string, error) {
	secrets := keySessions[session]
	if len(secrets) == 0 {
		return "", nil
	}
	transform := controller.SecretDigester(key)
	h := sha256.New()
	for _, name := range slices.Sorted(slices.Values(secrets)) {
		s, err := f.e.kube.CoreV1().Secrets(f.ns).Get(f.e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		standIn, err := transform(s)
		if err != nil {
			return "", err
		}
		digest := standIn.(*corev1.Secret).Annotations["games.example.com/data-digest"]
		if digest == "" {
			return "", fmt.Errorf("the transform left no digest on %s", name)
		}
		fmt.Fprintf(h, "%s\x00%s\x00", name, digest)
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// recordsAre checks that every Deployment's key record is what want says
// of it ("" for none).
func (f *keyFixture) recordsAre(want func(session string) (string, error)) (bool, error) {
	for name := range keySessions {
		d, err := f.e.kube.AppsV1().Deployments(f.ns).Get(f.e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		w, err := want(name)
		if err != nil {
			return false, err
		}
		if got := d.Labels[gamesv1.SecretsKeyLabel]; got != w {
			return false, fmt.Errorf("the Deployment %s records key %q, want %q", name, got, w)
		}
	}
	return true, nil
}

// barrier creates a session in the barrier namespace and waits for its
// Deployment: the controller has then been through every session queued
// before it.
func (f *keyFixture) barrier(bound time.Duration) time.Duration {
	f.barriers++
	name := fmt.Sprintf("barrier-%d", f.barriers)
	f.e.createSession(f.barrierNS, name, "arena")
	return f.e.measure("the controller's first pass (the Deployment of "+name+")", bound, func() (bool, error) {
		_, err := f.e.kube.AppsV1().Deployments(f.barrierNS).Get(f.e.ctx, name, metav1.GetOptions{})
		return err == nil, err
	})
}

// podLog is every change of the namespace's pods a watch saw, from a
// baseline on: a pod created, or one deleted or marked for deletion.
type podLog struct {
	mu      sync.Mutex
	base    map[types.UID]string // pod → session, at the start
	created map[string][]podEvent
	deleted map[string][]podEvent
}

type podEvent struct {
	uid types.UID
	at  time.Time
}

// watchPods follows the namespace's pods, from base (each session's pod)
// on, until the test ends.
func (f *keyFixture) watchPods(base map[string]deploymentState) *podLog {
	f.e.t.Helper()
	l := &podLog{base: map[types.UID]string{}, created: map[string][]podEvent{}, deleted: map[string][]podEvent{}}
	for name, s := range base {
		l.base[s.pod] = name
	}
	seenDeleting := map[types.UID]bool{}
	note := func(obj interface{}, gone bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		session := pod.Labels[controller.LabelInstance]
		l.mu.Lock()
		defer l.mu.Unlock()
		if _, known := l.base[pod.UID]; !known && !slices.ContainsFunc(l.created[session], func(e podEvent) bool { return e.uid == pod.UID }) {
			l.created[session] = append(l.created[session], podEvent{pod.UID, time.Now()})
		}
		if (gone || pod.DeletionTimestamp != nil) && !seenDeleting[pod.UID] {
			seenDeleting[pod.UID] = true
			l.deleted[session] = append(l.deleted[session], podEvent{pod.UID, time.Now()})
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory := kubeinformers.NewSharedInformerFactoryWithOptions(f.e.kube, 0, kubeinformers.WithNamespace(f.ns))
	informer := factory.Core().V1().Pods().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { note(obj, false) },
		UpdateFunc: func(_, obj interface{}) { note(obj, false) },
		DeleteFunc: func(obj interface{}) { note(obj, true) },
	}); err != nil {
		f.e.t.Fatal(err)
	}
	factory.Start(ctx.Done())
	f.e.t.Cleanup(func() { cancel(); factory.Shutdown() })
	if !cache.WaitForCacheSync(f.e.ctx.Done(), informer.HasSynced) {
		f.e.t.Fatal("the pod watch did not sync")
	}
	return l
}

// changes says what happened to the pods, other than to those of the
// allowed sessions between from and until: "" if nothing.
func (l *podLog) changes(from, until time.Time, allowed ...string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for what, events := range map[string]map[string][]podEvent{"created": l.created, "deleted": l.deleted} {
		for session, evs := range events {
			for _, ev := range evs {
				if !slices.Contains(allowed, session) || ev.at.Before(from) || !ev.at.Before(until) {
					out = append(out, fmt.Sprintf("a pod of %s %s at %s (%s)", session, what, ev.at.Format(time.TimeOnly), ev.uid))
				}
			}
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// replacedOnce says whether each session's pod of base was deleted, and
// exactly one pod was created for it, since.
func (l *podLog) replacedOnce(base map[string]deploymentState, sessions []string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range sessions {
		if n := len(l.created[s]); n != 1 {
			if n > 1 {
				return false, broken{fmt.Errorf("session %s got %d new pods, want 1", s, n)}
			}
			return false, fmt.Errorf("session %s got no new pod yet", s)
		}
		if !slices.ContainsFunc(l.deleted[s], func(e podEvent) bool { return e.uid == base[s].pod }) {
			return false, fmt.Errorf("the old pod of %s not deleted yet", s)
		}
	}
	return true, nil
}

// rolledTo says whether each session's Deployment moved once, to the
// digest of its Secrets under key, recorded as made under it, and is
// complete.
func (f *keyFixture) rolledTo(base map[string]deploymentState, key []byte, sessions []string) (bool, error) {
	for _, name := range sessions {
		d, err := f.e.kube.AppsV1().Deployments(f.ns).Get(f.e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		want, err := f.expectedDigest(key, name)
		if err != nil {
			return false, err
		}
		sets, err := f.replicaSets(name)
		if err != nil {
			return false, err
		}
		if n := len(sets) - len(base[name].replicaSets); n > 1 {
			return false, broken{fmt.Errorf("the Deployment %s moved %d times (ReplicaSets %v)", name, n, sets)}
		}
		if got := d.Spec.Template.Annotations[gamesv1.SecretsHashAnnotation]; got != want {
			return false, fmt.Errorf("the Deployment %s runs digest %q, want %q", name, got, want)
		}
		if got, fp := d.Labels[gamesv1.SecretsKeyLabel], controller.KeyFingerprint(key); got != fp {
			return false, fmt.Errorf("the Deployment %s records key %q, want %q", name, got, fp)
		}
		if !rolledOut(d) {
			return false, fmt.Errorf("the Deployment %s not complete", name)
		}
	}
	return true, nil
}

// checkBase checks what every Deployment runs and records before the key
// is touched: its Secrets' digest under key, made under key.
func (f *keyFixture) checkBase(base map[string]deploymentState, key []byte) {
	f.e.t.Helper()
	fp := controller.KeyFingerprint(key)
	for name, s := range base {
		want, err := f.expectedDigest(key, name)
		if err != nil {
			f.e.t.Fatal(err)
		}
		if got := s.template.Annotations[gamesv1.SecretsHashAnnotation]; got != want {
			f.e.t.Fatalf("the Deployment %s runs digest %q, want %q (the test's digest is wrong)", name, got, want)
		}
		wantRecord := fp
		if want == "" {
			wantRecord = ""
		}
		if s.keyRecord != wantRecord {
			f.e.t.Fatalf("the Deployment %s records key %q, want %q", name, s.keyRecord, wantRecord)
		}
	}
}

// adoptedUnder is the record of a Deployment whose template's digest the
// key took over: "FP.HASH", HASH the digest of its Secrets under key; ""
// for a session that reads none.
func (f *keyFixture) adoptedUnder(key []byte) func(session string) (string, error) {
	return func(session string) (string, error) {
		digest, err := f.expectedDigest(key, session)
		if digest == "" || err != nil {
			return "", err
		}
		return controller.KeyFingerprint(key) + "." + digest, nil
	}
}

// TestDigestKeyDeletedThenFailoverRestartsNoGameServer: two replicas with
// leader election, six sessions reading labelled Secrets (one, two, none),
// all running. The key Secret deleted: the leader says so in /readyz, an
// Event and its metric, and keeps its key. The leader stopped: the standby,
// which holds no key (a replica reads the key when it starts to lead), makes
// a new one and takes over every digest with a metadata write; all stopped
// and a fresh process started: it reads that key and changes nothing. No
// pod is replaced, no pod template changes, until a rotation of one Secret
// rolls exactly its readers, once each.
func TestDigestKeyDeletedThenFailoverRestartsNoGameServer(t *testing.T) {
	e := newEnv(t)
	cfg := e.controllerIdentity()
	f := e.keyFixture()
	a := e.startReplica("replica-a", cfg, true)
	b := e.startReplica("replica-b", cfg, true)
	e.measure("setup: two replicas, 6 sessions Ready with their pods running", 2*waitTimeout, f.running)
	var leader, standby *replica
	e.measure("one replica to lead", waitTimeout, func() (bool, error) {
		la, lb := a.leads(e.ctx), b.leads(e.ctx)
		switch {
		case la && !lb:
			leader, standby = a, b
		case lb && !la:
			leader, standby = b, a
		default:
			return false, fmt.Errorf("replica-a leads: %v, replica-b: %v", la, lb)
		}
		return true, nil
	})
	t.Logf("%s leads, %s stands by", leader.name, standby.name)
	data, err := e.digestKey()
	if err != nil || data == nil {
		t.Fatalf("the key Secret: %v (exists: %v)", err, data != nil)
	}
	oldKey := data[controller.DigestKeyField]
	base := f.snapshot()
	f.checkBase(base, oldKey)
	pods := f.watchPods(base)
	if code, body := leader.readyz(e.ctx); code != http.StatusOK {
		t.Fatalf("the leader's /readyz before the delete: %d %q", code, body)
	}

	// The key Secret deleted: the leader reports it in its three ways.
	if err := e.kube.CoreV1().Secrets(e.ownNamespace).Delete(e.ctx, keySecretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone := fmt.Sprintf("the Secret digest key %s/%s is gone", e.ownNamespace, keySecretName)
	e.measure("the leader to report the key Secret deleted (/readyz, Event, metric)", waitTimeout, func() (bool, error) {
		if code, body := leader.readyz(e.ctx); code != http.StatusServiceUnavailable || !strings.Contains(body, gone) {
			return false, fmt.Errorf("/readyz %d %q", code, body)
		}
		if ev, err := e.keyEvent("SecretDigestKeyDeleted"); ev == nil || ev.Type != corev1.EventTypeWarning {
			return false, fmt.Errorf("no Warning Event SecretDigestKeyDeleted on the Secret (%v)", err)
		}
		if state := leader.keyState(e.ctx); state != "missing" {
			return false, fmt.Errorf("%s says %q", keyStateMetric, state)
		}
		return true, f.kept(base)
	})
	// A standby holds no key, and has nothing to report.
	if code, body := standby.readyz(e.ctx); code != http.StatusOK {
		t.Errorf("the standby's /readyz: %d %q, want 200", code, body)
	}
	// The controller does not put the key back: a deleted Secret may be a
	// step of a rotation.
	if data, err := e.digestKey(); err != nil || data != nil {
		t.Errorf("the key Secret exists again while the leader runs (%v)", err)
	}

	// Failover: the standby leads, with no key to read, and makes one.
	stopping := time.Now()
	leader.stop(t)
	t.Logf("the leader stopped in %s", time.Since(stopping).Round(10*time.Millisecond))
	var newKey []byte
	e.measure("failover: the standby leads with a new key, every Deployment's digest taken over", waitTimeout, func() (bool, error) {
		if err := f.kept(base); err != nil {
			return false, err
		}
		data, err := e.digestKey()
		if err != nil || data == nil {
			return false, fmt.Errorf("no key Secret yet (%v)", err)
		}
		newKey = data[controller.DigestKeyField]
		if controller.KeyFingerprint(newKey) == controller.KeyFingerprint(oldKey) {
			return false, broken{errors.New("the new key Secret holds the old key")}
		}
		return f.recordsAre(f.adoptedUnder(newKey))
	})
	if !standby.leads(e.ctx) {
		t.Errorf("%s does not lead", standby.name)
	}
	if code, body := standby.readyz(e.ctx); code != http.StatusOK {
		t.Errorf("the new leader's /readyz: %d %q, want 200", code, body)
	}
	if state := standby.keyState(e.ctx); state != "present" {
		t.Errorf("the new leader's %s says %q, want present", keyStateMetric, state)
	}
	// The controller is cluster-wide: Deployments of an earlier test still
	// terminating would count too (keyFixture waits for its own to go).
	withSecrets := float64(len(keySessions) - 1)
	if n := standby.adopted(e.ctx); n != withSecrets {
		t.Errorf("the new leader counts %g digests adopted, want %g", n, withSecrets)
	}

	// Every process stopped, a fresh one started: it reads the new key, and
	// the records say what the old digests stand for under it.
	standby.stop(t)
	fresh := e.startReplica("replica-c", cfg, true)
	e.measure("the fresh process to lead, ready", waitTimeout, func() (bool, error) {
		code, body := fresh.readyz(e.ctx)
		return fresh.leads(e.ctx) && code == http.StatusOK, fmt.Errorf("leads: %v, /readyz %d %q", fresh.leads(e.ctx), code, body)
	})
	f.barrier(waitTimeout)
	if err := f.kept(base); err != nil {
		t.Fatal(err)
	}
	if ok, err := f.recordsAre(f.adoptedUnder(newKey)); !ok {
		t.Errorf("after the restart: %v", err)
	}
	if n := fresh.adopted(e.ctx); n != 0 {
		t.Errorf("the fresh process counts %g digests adopted, want 0", n)
	}
	if data, err := e.digestKey(); err != nil || !slices.Equal(data[controller.DigestKeyField], newKey) {
		t.Errorf("the key Secret no longer holds the key the standby made (%v)", err)
	}

	// One Secret rotated: exactly its readers roll, once each, to its
	// digest under the new key.
	rotated := time.Now()
	e.putSecret(f.ns, "alpha", true, []byte("alpha-second"))
	moved := readers("alpha")
	e.measure("alpha's readers rolled, once each", waitTimeout, func() (bool, error) {
		if err := f.kept(base, moved...); err != nil {
			return false, err
		}
		if ok, err := f.rolledTo(base, newKey, moved); !ok {
			return false, err
		}
		return pods.replacedOnce(base, moved)
	})
	f.barrier(waitTimeout)
	if err := f.kept(base, moved...); err != nil {
		t.Error(err)
	}
	if changes := pods.changes(rotated, time.Now(), moved...); changes != "" {
		t.Errorf("pods changed that should not have: %s", changes)
	}
	if ok, err := pods.replacedOnce(base, moved); !ok {
		t.Errorf("the readers' pods: %v", err)
	}
	for _, name := range moved {
		if got, err := f.replicaSets(name); err != nil || len(got) != len(base[name].replicaSets)+1 {
			t.Errorf("%s has ReplicaSets %v, had %v (%v)", name, got, base[name].replicaSets, err)
		}
	}
}

// TestDigestKeyRotationRestartsNoGameServer: the documented rotation. The
// admin reads the key, deletes its Secret and creates it again with a new
// key and the old one as previous; the running controller says the Secret
// holds another key. Stopped, one Secret changed, started again: exactly
// that Secret's readers restart, once each, and every other Deployment
// keeps its template and records the new key over its old digest. Then
// previous removed and the controller restarted: nothing restarts.
func TestDigestKeyRotationRestartsNoGameServer(t *testing.T) {
	e := newEnv(t)
	cfg := e.controllerIdentity()
	f := e.keyFixture()
	first := e.startReplica("first", cfg, false)
	e.measure("setup: 6 sessions Ready with their pods running", 2*waitTimeout, f.running)
	data, err := e.digestKey()
	if err != nil || data == nil {
		t.Fatalf("the key Secret: %v (exists: %v)", err, data != nil)
	}
	oldKey := data[controller.DigestKeyField]
	base := f.snapshot()
	f.checkBase(base, oldKey)
	pods := f.watchPods(base)

	// The rotation's Secret: a new key, and the old one as previous.
	newKey := make([]byte, 32)
	if _, err := rand.Read(newKey); err != nil {
		t.Fatal(err)
	}
	e.putDigestKey(map[string][]byte{controller.DigestKeyField: newKey, controller.PreviousDigestKeyField: oldKey})
	replaced := fmt.Sprintf("the Secret digest key %s/%s holds another key", e.ownNamespace, keySecretName)
	e.measure("the running controller to report the key replaced (/readyz, Event, metric)", waitTimeout, func() (bool, error) {
		if code, body := first.readyz(e.ctx); code != http.StatusServiceUnavailable || !strings.Contains(body, replaced) {
			return false, fmt.Errorf("/readyz %d %q", code, body)
		}
		if ev, err := e.keyEvent("SecretDigestKeyReplaced"); ev == nil || ev.Type != corev1.EventTypeWarning {
			return false, fmt.Errorf("no Warning Event SecretDigestKeyReplaced on the Secret (%v)", err)
		}
		if state := first.keyState(e.ctx); state != "replaced" {
			return false, fmt.Errorf("%s says %q", keyStateMetric, state)
		}
		return true, f.kept(base)
	})

	// Restarted, with a Secret changed while no controller ran.
	first.stop(t)
	e.putSecret(f.ns, "gamma", true, []byte("gamma-second"))
	rotated := time.Now()
	second := e.startReplica("second", cfg, false)
	moved := readers("gamma")
	keptUnder := f.adoptedUnder(newKey)
	e.measure("after the restart, gamma's readers rolled once each, every other digest taken over", waitTimeout, func() (bool, error) {
		if err := f.kept(base, moved...); err != nil {
			return false, err
		}
		if ok, err := f.rolledTo(base, newKey, moved); !ok {
			return false, err
		}
		if ok, err := f.recordsAre(func(session string) (string, error) {
			if slices.Contains(moved, session) {
				return controller.KeyFingerprint(newKey), nil
			}
			return keptUnder(session)
		}); !ok {
			return false, err
		}
		return pods.replacedOnce(base, moved)
	})
	f.barrier(waitTimeout)
	if err := f.kept(base, moved...); err != nil {
		t.Fatal(err)
	}
	if changes := pods.changes(rotated, time.Now(), moved...); changes != "" {
		t.Errorf("pods changed that should not have: %s", changes)
	}
	if ok, err := pods.replacedOnce(base, moved); !ok {
		t.Errorf("the readers' pods: %v", err)
	}
	if code, body := second.readyz(e.ctx); code != http.StatusOK {
		t.Errorf("/readyz after the rotation: %d %q, want 200", code, body)
	}
	if state := second.keyState(e.ctx); state != "present" {
		t.Errorf("%s after the rotation says %q, want present", keyStateMetric, state)
	}
	// A rotation checks the old digests: none is taken on trust.
	if n := second.adopted(e.ctx); n != 0 {
		t.Errorf("the rotated process counts %g digests adopted, want 0", n)
	}

	// The rotation done: previous removed, the controller restarted.
	rotatedState := f.snapshot()
	e.putDigestKey(map[string][]byte{controller.DigestKeyField: newKey})
	second.stop(t)
	dropped := time.Now()
	third := e.startReplica("third", cfg, false)
	e.measure("the controller restarted without previous, ready", waitTimeout, func() (bool, error) {
		code, body := third.readyz(e.ctx)
		return code == http.StatusOK, fmt.Errorf("/readyz %d %q", code, body)
	})
	f.barrier(waitTimeout)
	if err := f.kept(rotatedState); err != nil {
		t.Fatal(err)
	}
	if ok, err := f.recordsAre(func(session string) (string, error) {
		return rotatedState[session].keyRecord, nil
	}); !ok {
		t.Errorf("after previous was removed: %v", err)
	}
	// The rotation's restarts, and nothing since.
	if changes := pods.changes(rotated, dropped, moved...); changes != "" {
		t.Errorf("pods changed that should not have: %s", changes)
	}
}
