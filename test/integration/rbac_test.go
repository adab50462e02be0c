package integration

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	"github.com/example/gamesession-controller/internal/testutil"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	"github.com/example/gamesession-controller/pkg/profileack"
	"github.com/example/gamesession-controller/pkg/rollout"
)

const (
	rbacServiceAccount = "gamesession-controller"
	// The Lease the leader election Role grants by resourceName: the
	// default --leader-election-id.
	rbacLeaseName = "gamesession-controller"

	// denialTimeout bounds the wait for the API server to refuse the request
	// a revoked verb was needed for. The controller sends most within a
	// second or two of the step that needs it; the delete of a stale revision
	// waits until no ReplicaSet mounts it and, for a profile edit, until the
	// edit's rollout completes (the previous revision is the stable one till
	// then): about 2s here.
	denialTimeout = 40 * time.Second

	// blindFor is how long a change must go unseen by the controller once
	// its watch of the change's resource is refused and its lists of it are
	// held (requestCounter.holdLists). A watching controller completes each
	// such step well within it: the slowest measured in CI, a profile edit
	// rolled to three Deployments, took 2.3s on busy cores, and 4.6s and
	// 4.85s with the race-enabled unit tests beside it. 10s is twice that.
	blindFor = 10 * time.Second

	// heldFor is how long a revision that a ReplicaSet mounts must be seen
	// kept once it is stale otherwise: several profile syncs (one follows
	// each write of the ProfileRollout, and planInterval is 250ms).
	heldFor = time.Second
)

// rbacStep is one part of the controller's job. Every verb in the artifacts'
// roles is needed by some step.
type rbacStep struct {
	name string
	act  func(*rbacScenario) // what the test does first; nil for nothing
	done func(*rbacScenario) (bool, error)
	// reaction marks a step that needs a watch: the controller must react
	// to a change the test makes.
	reaction bool
}

// rbacScenario runs the controller as a ServiceAccount bound to the roles of
// artifacts/rbac and drives it through its whole job.
type rbacScenario struct {
	*env
	ctl      *runningController
	hash     string   // the arena profile's current hash
	sessions []string // the sessions of the arena profile
	oldUID   types.UID
	// vault is a profile without sessions whose first revision a
	// ReplicaSet of the test's own (holdout) mounts: vaultHashes are its
	// contents, first to last.
	vaultHashes []string
	// secretsHash is the digest of rbacSecret in the first session's
	// Deployment.
	secretsHash string
	heldSince   time.Time
	// liveHash is the live profile's current content, and livePending
	// whether the session was seen waiting for its pod to apply it.
	liveHash    string
	livePending bool
}

// The vault profile and the ReplicaSet that holds its first revision, and
// the labelled Secret the first session reads.
const (
	vaultProfile = "vault"
	holdoutName  = "holdout"
	rbacSecret   = "arena-credentials"
	// The profile delivered live, and its one session.
	liveProfile = "lobby"
	liveSession = "lobby-0"
)

var rbacSteps = []rbacStep{
	{name: "take the lease", done: func(s *rbacScenario) (bool, error) {
		lease, err := s.kube.CoordinationV1().Leases(s.ns).Get(s.ctx, rbacLeaseName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		return holder != "", fmt.Errorf("lease holder %q", holder)
	}},
	{name: "create Deployments", done: func(s *rbacScenario) (bool, error) {
		if ok, err := s.deploymentsCarry(s.sessions, s.hash); !ok {
			return false, err
		}
		// The first session's template reads the labelled Secret: its
		// Deployment carries the Secret's digest.
		d, err := s.deployment(s.sessions[0])
		if err != nil {
			return false, err
		}
		s.secretsHash = d.Spec.Template.Annotations[gamesv1.SecretsHashAnnotation]
		return s.secretsHash != "", fmt.Errorf("deployment %s carries no digest of Secret %s", d.Name, rbacSecret)
	}},
	{name: "roll a Secret rotation", reaction: true,
		act: func(s *rbacScenario) {
			secret, err := s.kube.CoreV1().Secrets(s.ns).Get(s.ctx, rbacSecret, metav1.GetOptions{})
			if err != nil {
				s.t.Fatal(err)
			}
			secret.Data["token"] = []byte("rotated")
			if _, err := s.kube.CoreV1().Secrets(s.ns).Update(s.ctx, secret, metav1.UpdateOptions{}); err != nil {
				s.t.Fatal(err)
			}
		},
		done: func(s *rbacScenario) (bool, error) {
			d, err := s.deployment(s.sessions[0])
			if err != nil {
				return false, err
			}
			got := d.Spec.Template.Annotations[gamesv1.SecretsHashAnnotation]
			if got == "" || got == s.secretsHash {
				return false, fmt.Errorf("deployment %s still carries the digest from before the rotation", d.Name)
			}
			s.secretsHash = got
			return true, nil
		}},
	{name: "record the rollout",
		// The profile's ProfileRollout, created and its status written for
		// the profile's content, up to every session Ready: until then the
		// controller has status to write, and a write that finds the
		// ProfileRollout gone (the next step deletes it) creates it again
		// without the watch.
		done: func(s *rbacScenario) (bool, error) {
			if ok, err := s.rolloutRecorded("arena", s.hash, ""); !ok {
				return ok, err
			}
			r, err := s.game.GamesV1().ProfileRollouts(s.ns).Get(s.ctx, "arena", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			st := r.Status
			return st.TotalSessions > 0 && st.ReadySessions == st.TotalSessions && st.MovedSessions == st.TotalSessions,
				fmt.Errorf("ProfileRollout arena: %d moved and %d ready of %d", st.MovedSessions, st.ReadySessions, st.TotalSessions)
		}},
	{name: "restore a deleted ProfileRollout", reaction: true,
		// Only the ProfileRollout informer sees the delete: the controller
		// creates the profile's ProfileRollout again and writes its status.
		act: func(s *rbacScenario) {
			r, err := s.game.GamesV1().ProfileRollouts(s.ns).Get(s.ctx, "arena", metav1.GetOptions{})
			if err != nil {
				s.t.Fatal(err)
			}
			s.oldUID = r.UID
			if err := s.game.GamesV1().ProfileRollouts(s.ns).Delete(s.ctx, "arena", metav1.DeleteOptions{}); err != nil {
				s.t.Fatal(err)
			}
		},
		done: func(s *rbacScenario) (bool, error) { return s.rolloutRecorded("arena", s.hash, s.oldUID) }},
	{name: "keep a revision a ReplicaSet mounts",
		// A revision stays while a ReplicaSet with pods mounts it, as the old
		// ReplicaSet of a paused or stuck rollout does: the holdout
		// ReplicaSet (see setUpRBACScenario) mounts the vault profile's first
		// revision, and the profile is edited. The vault has no sessions, so
		// its rollout completes at once and the first revision is neither
		// the current one nor the stable one: only the ReplicaSet keeps it,
		// for as long as the test looks (heldFor).
		act: func(s *rbacScenario) {
			edited := s.updateProfile(vaultProfile, func(cm *corev1.ConfigMap) { cm.Data["vault.cfg"] = "v2" })
			s.vaultHashes = append(s.vaultHashes, controller.ProfileHash(edited))
		},
		done: func(s *rbacScenario) (bool, error) {
			first, second := s.vaultHashes[0], s.vaultHashes[1]
			r, err := s.game.GamesV1().ProfileRollouts(s.ns).Get(s.ctx, vaultProfile, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got, want := s.revisions(vaultProfile), revisionNames(vaultProfile, first, second)
			slices.Sort(want)
			if r.Status.StableHash != second || !slices.Equal(got, want) {
				s.heldSince = time.Time{}
				return false, fmt.Errorf("ProfileRollout %s: stable %q (phase %s), want %q; revisions %q, want %q",
					vaultProfile, r.Status.StableHash, r.Status.Phase, second, got, want)
			}
			if s.heldSince.IsZero() {
				s.heldSince = time.Now()
			}
			held := time.Since(s.heldSince)
			return held >= heldFor, fmt.Errorf("revision %s kept for %s only", want[0], held)
		}},
	{name: "delete a revision no ReplicaSet mounts", reaction: true,
		// Only the ReplicaSet informer sees the holdout scale to zero: then
		// nothing mounts the vault's first revision, and it is stale.
		act: func(s *rbacScenario) {
			patch := []byte(`{"spec":{"replicas":0}}`)
			if _, err := s.kube.AppsV1().ReplicaSets(s.ns).Patch(s.ctx, holdoutName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				s.t.Fatal(err)
			}
		},
		done: func(s *rbacScenario) (bool, error) {
			got, want := s.revisions(vaultProfile), revisionNames(vaultProfile, s.vaultHashes[1])
			return slices.Equal(got, want), fmt.Errorf("revisions of %s %q, want only the current one, %q", vaultProfile, got, want)
		}},
	{name: "recreate a deleted Deployment", reaction: true,
		act: func(s *rbacScenario) {
			d, err := s.deployment("arena-0")
			if err != nil {
				s.t.Fatal(err)
			}
			s.oldUID = d.UID
			if err := s.kube.AppsV1().Deployments(s.ns).Delete(s.ctx, "arena-0", metav1.DeleteOptions{}); err != nil {
				s.t.Fatal(err)
			}
		},
		done: func(s *rbacScenario) (bool, error) {
			d, err := s.deployment("arena-0")
			if err != nil {
				return false, err
			}
			return d.UID != s.oldUID, fmt.Errorf("deployment arena-0 not recreated")
		}},
	{name: "sync a session created later", reaction: true,
		act: func(s *rbacScenario) {
			s.createSession(newSession("newcomer", "arena", 1))
			s.sessions = append(s.sessions, "newcomer")
		},
		done: func(s *rbacScenario) (bool, error) { return s.deploymentsCarry([]string{"newcomer"}, s.hash) }},
	{name: "write status", done: func(s *rbacScenario) (bool, error) {
		for _, name := range s.sessions {
			gs := s.session(name)
			c := meta.FindStatusCondition(gs.Status.Conditions, gamesv1.ConditionProfileResolved)
			if c == nil || c.Status != metav1.ConditionTrue || gs.Status.ProfileHash != s.hash {
				return false, fmt.Errorf("session %s status %+v", name, gs.Status)
			}
		}
		c := meta.FindStatusCondition(s.session("drifter").Status.Conditions, gamesv1.ConditionProfileResolved)
		if c == nil || c.Reason != gamesv1.ReasonProfileNotFound {
			return false, fmt.Errorf("drifter's ProfileResolved condition: %+v", c)
		}
		return true, nil
	}},
	{name: "record events", done: func(s *rbacScenario) (bool, error) {
		for _, name := range s.sessions {
			if !s.hasEvent(name, controller.EventReasonCreated, "") {
				return false, fmt.Errorf("no %s event on %s", controller.EventReasonCreated, name)
			}
		}
		if !s.hasEvent("drifter", gamesv1.ReasonProfileNotFound, "") {
			return false, fmt.Errorf("no %s event on drifter", gamesv1.ReasonProfileNotFound)
		}
		return true, nil
	}},
	{name: "roll a profile edit", reaction: true,
		act: func(s *rbacScenario) {
			edited := s.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data["server.cfg"] = "max_players=32" })
			s.hash = controller.ProfileHash(edited)
		},
		done: func(s *rbacScenario) (bool, error) {
			if ok, err := s.deploymentsCarry(s.sessions, s.hash); !ok {
				return false, err
			}
			for _, name := range s.sessions {
				if gs := s.session(name); gs.Status.ProfileHash != s.hash {
					return false, fmt.Errorf("session %s status.profileHash %q", name, gs.Status.ProfileHash)
				}
			}
			want := fmt.Sprintf("rolling %d GameSession", len(s.sessions))
			if !s.hasEvent("arena", controller.EventReasonProfileFanOut, want) {
				return false, fmt.Errorf("no %s event on the profile saying %q", controller.EventReasonProfileFanOut, want)
			}
			return true, nil
		}},
	{name: "delete a stale revision",
		// The controller keeps no revision for rollback (see start): once
		// every Deployment has moved to the edit's revision, the one they
		// mounted before is stale, and only the current one may remain.
		done: func(s *rbacScenario) (bool, error) {
			list, err := s.kube.CoreV1().ConfigMaps(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: controller.RevisionSelector()})
			if err != nil {
				return false, err
			}
			var got []string
			for _, cm := range list.Items {
				if cm.Annotations[controller.RevisionOfAnnotation] == "arena" {
					got = append(got, cm.Name)
				}
			}
			want := controller.RevisionName("arena", s.hash)
			return slices.Equal(got, []string{want}), fmt.Errorf("revisions of arena %q, want only the current one, %s", got, want)
		}},
	{name: "repeat a warning",
		// The event recorder creates an Event the first time and patches its
		// count when the same Event recurs: the drifter's profile comes and
		// goes, and ProfileNotFound is reported a second time.
		act: func(s *rbacScenario) {
			s.createProfile("late", map[string]string{"k": "v"}, true)
			s.waitForCondition("drifter", gamesv1.ConditionProfileResolved, metav1.ConditionTrue, gamesv1.ReasonProfileResolved)
			if err := s.kube.CoreV1().ConfigMaps(s.ns).Delete(s.ctx, "late", metav1.DeleteOptions{}); err != nil {
				s.t.Fatal(err)
			}
		},
		done: func(s *rbacScenario) (bool, error) {
			for _, ev := range s.eventsAbout("drifter") {
				if ev.Reason == gamesv1.ReasonProfileNotFound {
					return ev.Count == 2, fmt.Errorf("%s event count %d", ev.Reason, ev.Count)
				}
			}
			return false, fmt.Errorf("no %s event", gamesv1.ReasonProfileNotFound)
		}},
	{name: "repair a removed managed-by label", reaction: true,
		// Without the label the Deployment leaves the controller's filtered
		// cache, so the session's create answers AlreadyExists. Only a GET
		// shows the Deployment is still the session's own, to patch its label back.
		act: func(s *rbacScenario) {
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, controller.LabelManagedBy)
			d, err := s.kube.AppsV1().Deployments(s.ns).Patch(s.ctx, "arena-1", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			if err != nil {
				s.t.Fatal(err)
			}
			s.oldUID = d.UID
		},
		done: func(s *rbacScenario) (bool, error) {
			d, err := s.deployment("arena-1")
			if err != nil {
				return false, err
			}
			if d.UID != s.oldUID {
				return false, fmt.Errorf("deployment arena-1 was replaced, not repaired")
			}
			got, ok := d.Labels[controller.LabelManagedBy]
			return got == controller.ManagedByValue, fmt.Errorf("deployment arena-1 label %s=%q (present: %v)", controller.LabelManagedBy, got, ok)
		}},
	{name: "report a ConfigMap in a revision's way", reaction: true,
		// A ConfigMap without the revision label holds the name of the next
		// content's revision: the create answers AlreadyExists, and only a
		// GET tells it from the controller's own revision not cached yet.
		// The ProfileRollout then says so. The arena profile stays stuck:
		// no later step edits it.
		act: func(s *rbacScenario) {
			next := map[string]string{"server.cfg": "max_players=64"}
			name := controller.RevisionName("arena", controller.ProfileHash(&corev1.ConfigMap{Data: next}))
			s.createConfigMap(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"squatter": "yes"}})
			s.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data = next })
		},
		done: func(s *rbacScenario) (bool, error) {
			r, err := s.game.GamesV1().ProfileRollouts(s.ns).Get(s.ctx, "arena", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			c := meta.FindStatusCondition(r.Status.Conditions, gamesv1.ConditionRevisionAvailable)
			return c != nil && c.Reason == gamesv1.ReasonRevisionNameTaken, fmt.Errorf("ProfileRollout arena RevisionAvailable %+v", c)
		}},
	// Live delivery, last: the steps above need none of its verbs, and
	// those it shares with them (create configmaps, the watches of
	// ConfigMaps and GameSessions) fail earlier there.
	{name: "deliver a live profile",
		// A profile delivered live from the start and a session of it: the
		// controller creates the session's live profile, and the test,
		// as the game server, acknowledges it on the session's pod. The
		// pod cache must show the pod, then its acknowledgment; where the
		// pod watch is refused, the informer's lists bring both.
		act: func(s *rbacScenario) {
			profile := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{
					Name:        liveProfile,
					Labels:      map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue},
					Annotations: map[string]string{rollout.AnnotationDelivery: string(rollout.DeliveryLive)},
				},
				Data: map[string]string{"lobby.cfg": "v1"},
			}
			s.liveHash, s.livePending = controller.ProfileHash(s.createConfigMap(profile)), false
			s.createSession(newSession(liveSession, liveProfile, 1))
		},
		done: func(s *rbacScenario) (bool, error) { return s.deliveredLive() }},
	{name: "deliver a profile edit live", reaction: true,
		// The edit rewrites the session's live profile (an update: it
		// exists), and the session is up to date once the controller sees
		// its game server acknowledge the new revision: only the pod watch
		// shows that, as the pod cache holds the acknowledgment of the
		// revision before.
		act: func(s *rbacScenario) {
			edited := s.updateProfile(liveProfile, func(cm *corev1.ConfigMap) { cm.Data["lobby.cfg"] = "v2" })
			s.liveHash, s.livePending = controller.ProfileHash(edited), false
		},
		done: func(s *rbacScenario) (bool, error) { return s.deliveredLive() }},
}

// deliveredLive acts as the live session's game server and reports whether
// the session is up to date with its live profile's current revision, which
// the controller learns from its pod cache. The game server acknowledges
// only once the session says it waits for its one pod: that count comes
// from the same cache, and a cache without the pod would count 0 of 0 as
// applied, acknowledgment or not.
func (s *rbacScenario) deliveredLive() (bool, error) {
	want := controller.RevisionName(liveProfile, s.liveHash)
	if held := s.liveProfileRevision(liveSession); held != want {
		return false, fmt.Errorf("live profile of %s holds %q, want %q", liveSession, held, want)
	}
	// The session and its ProfileUpToDate, once its status is on the
	// current content.
	current := func() (*gamesv1.GameSession, *metav1.Condition) {
		gs := s.session(liveSession)
		if gs.Status.ProfileHash != s.liveHash {
			return gs, nil
		}
		return gs, meta.FindStatusCondition(gs.Status.Conditions, gamesv1.ConditionProfileUpToDate)
	}
	if !s.livePending {
		gs, c := current()
		pending := fmt.Sprintf(controller.MessageDeliveryPending, want, 0, 1)
		if c == nil || c.Reason != gamesv1.ReasonDeliveryPending || c.Message != pending {
			return false, fmt.Errorf("session %s (status.profileHash %q): ProfileUpToDate %+v, want %s %q first",
				liveSession, gs.Status.ProfileHash, c, gamesv1.ReasonDeliveryPending, pending)
		}
		s.livePending = true
	}
	if err := s.acknowledgeLive(liveSession, want); err != nil {
		return false, err
	}
	_, c := current()
	if c == nil {
		return false, fmt.Errorf("session %s: no ProfileUpToDate for %s", liveSession, want)
	}
	return c.Status == metav1.ConditionTrue && c.Reason == gamesv1.ReasonRevisionCurrent,
		fmt.Errorf("session %s ProfileUpToDate %s/%s: %s", liveSession, c.Status, c.Reason, c.Message)
}

// liveProfileRevision is the revision the session's live profile holds, ""
// for none yet.
func (e *env) liveProfileRevision(session string) string {
	cm, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, session+"-live-profile", metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return cm.Data[profileack.RevisionFile]
}

// acknowledgeLive acknowledges revision on every running pod of the
// session, as profileack.Follow in its game server would once the kubelet
// wrote the revision to the mounted files (kwok pods run nothing), with the
// admin client. It fails unless at least one pod runs.
func (e *env) acknowledgeLive(session, revision string) error {
	pods, err := e.kube.CoreV1().Pods(e.ns).List(e.ctx, metav1.ListOptions{
		LabelSelector: controller.LivePodSelector() + "," + controller.LabelInstance + "=" + session})
	if err != nil {
		return err
	}
	running := 0
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		running++
		if ack, ok := profileack.Parse(pod.Annotations[profileack.Annotation]); ok && ack.Revision == revision {
			continue
		}
		if err := profileack.Acknowledge(e.ctx, e.kube, e.ns, pod.Name, revision, nil); err != nil {
			return err
		}
	}
	if running == 0 {
		return fmt.Errorf("no running pod of session %s delivers live (%d pods)", session, len(pods.Items))
	}
	return nil
}

// rolloutRecorded reports whether the profile's ProfileRollout exists,
// other than the one of UID not (if set), with its status written for the
// content hash.
func (e *env) rolloutRecorded(profile, hash string, not types.UID) (bool, error) {
	r, err := e.game.GamesV1().ProfileRollouts(e.ns).Get(e.ctx, profile, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	if not != "" && r.UID == not {
		return false, fmt.Errorf("ProfileRollout %s not recreated", profile)
	}
	return r.Status.TargetHash == hash && r.Status.Phase != "",
		fmt.Errorf("ProfileRollout %s: target %q, phase %q; want target %q", profile, r.Status.TargetHash, r.Status.Phase, hash)
}

// createHoldout creates a ReplicaSet whose pods mount the revision, as a
// Deployment's old ReplicaSet does, in the controller's ReplicaSet cache (the
// managed-by label). Its pods never schedule (no node matches), which is
// enough: a ReplicaSet mounts its revision while it wants pods or has any.
func (e *env) createHoldout(revision string) {
	e.t.Helper()
	podLabels := map[string]string{controller.LabelManagedBy: controller.ManagedByValue, "rbac-test": holdoutName}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: holdoutName, Labels: podLabels},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"rbac-test": holdoutName}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"rbac-test": "no-such-node"},
					Containers: []corev1.Container{{
						Name: "game-server", Image: "registry.example.com/arena-server:1.0.0",
						VolumeMounts: []corev1.VolumeMount{{Name: "profile", MountPath: "/etc/game"}},
					}},
					Volumes: []corev1.Volume{{Name: "profile", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: revision}},
					}}},
				},
			},
		},
	}
	if _, err := e.kube.AppsV1().ReplicaSets(e.ns).Create(e.ctx, rs, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create ReplicaSet %s: %v", holdoutName, err)
	}
}

// deploymentsCarry reports whether the sessions' Deployments all exist with
// the profile hash.
func (e *env) deploymentsCarry(sessions []string, hash string) (bool, error) {
	for _, name := range sessions {
		d, err := e.deployment(name)
		if err != nil {
			return false, err
		}
		if got := d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]; got != hash {
			return false, fmt.Errorf("deployment %s has hash %q, want %q", name, got, hash)
		}
	}
	return true, nil
}

// eventsAbout lists the Events about the named object in the namespace.
func (e *env) eventsAbout(name string) []corev1.Event {
	e.t.Helper()
	events, err := e.kube.CoreV1().Events(e.ns).List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		e.t.Fatalf("list events: %v", err)
	}
	return events.Items
}

func (e *env) hasEvent(object, reason, messagePart string) bool {
	e.t.Helper()
	return slices.ContainsFunc(e.eventsAbout(object), func(ev corev1.Event) bool {
		return ev.Reason == reason && strings.Contains(ev.Message, messagePart)
	})
}

// setUpRBACScenario loads the artifacts' roles, bound to the test's service
// account and less the revoked verbs, and creates a profile with three
// sessions, a session whose profile does not exist yet (a Warning from the
// start), and a profile without sessions whose first revision a ReplicaSet
// mounts. The caller creates the account and applies the roles.
func setUpRBACScenario(t *testing.T, revoked ...grantedVerb) (*rbacScenario, *controllerRBAC) {
	e := newEnv(t)
	r := loadControllerRBAC(t)
	r.bindTo(t, e.ns, rbacServiceAccount)
	for _, g := range revoked {
		r.revoke(g)
	}
	s := &rbacScenario{env: e}
	s.hash = controller.ProfileHash(e.createProfile("arena", map[string]string{"server.cfg": "max_players=16"}, true))
	e.createSecret(rbacSecret, map[string][]byte{"token": []byte("first")}, true)
	for i := range 3 {
		name := fmt.Sprintf("arena-%d", i)
		session := newSession(name, "arena", 1)
		if i == 0 {
			withSecretEnv(session, rbacSecret)
		}
		e.createSession(session)
		s.sessions = append(s.sessions, name)
	}
	e.createSession(newSession("drifter", "late", 1))
	// The vault and the ReplicaSet that mounts its first revision, before
	// the controller starts: its ReplicaSet informer lists the holdout
	// first thing, even when it may not watch.
	first := controller.ProfileHash(e.createProfile(vaultProfile, map[string]string{"vault.cfg": "v1"}, true))
	s.vaultHashes = []string{first}
	e.createHoldout(controller.RevisionName(vaultProfile, first))
	return s, r
}

// start creates the service account and its roles, and runs the controller
// in-process as that account, with leader election as the artifacts'
// Deployment runs it.
func (s *rbacScenario) start(r *controllerRBAC, revoked ...grantedVerb) {
	s.startWith(r, "", revoked...)
}

// startWith is start with --deployment-writes set, unless empty.
func (s *rbacScenario) startWith(r *controllerRBAC, deploymentWrites string, revoked ...grantedVerb) {
	cfg := s.serviceAccountConfig(rbacServiceAccount)
	s.applyRBAC(r)
	s.waitForAuthorizer(rbacServiceAccount, r, revoked...)
	s.ctl = s.startControllerAs(cfg, func(o *app.Options) {
		if deploymentWrites != "" {
			o.DeploymentWrites = deploymentWrites
		}
		o.LeaderElect = true
		o.LeaderElectionNamespace = s.ns
		// No revision kept for rollback: the one a profile edit replaces
		// is stale as soon as no Deployment mounts it, so the scenario's
		// one edit needs the delete.
		o.RevisionHistoryLimit = 0
	})
}

// TestRBACIsSufficient runs the controller's whole job as the artifacts'
// ServiceAccount, with leader election: every verb the roles grant is used,
// and none is refused.
func TestRBACIsSufficient(t *testing.T) {
	s, r := setUpRBACScenario(t)
	s.start(r)
	for _, step := range rbacSteps {
		start := time.Now()
		if step.act != nil {
			step.act(s)
		}
		s.eventually(step.name, func() (bool, error) { return step.done(s) })
		took := time.Since(start)
		t.Logf("step %q took %s", step.name, took.Round(time.Millisecond))
		// The refused-watch cases below rely on a watching controller
		// reacting well within blindFor.
		if step.reaction && took >= blindFor {
			t.Errorf("step %q took %s, want under %s", step.name, took, blindFor)
		}
	}
	for _, g := range r.grants() {
		key := g.verb + " " + g.resource
		// With streaming lists (client-go's WatchListClient, on by default)
		// an informer lists over a watch; TestRBACEachVerbIsNeeded shows the
		// list verbs are needed when streaming is unavailable.
		// A verb of another --deployment-writes mode is shown needed there.
		effect := revocationEffects[g.String()]
		if g.verb != "list" && !effect.elsewhere && effect.deploymentWrites == "" && s.ctl.requests.count(key) == 0 {
			t.Errorf("the controller never sent %q, which %s grants", key, g.role)
		}
		if n := s.ctl.requests.answered(key, http.StatusForbidden); n > 0 {
			t.Errorf("%q was refused %d times", key, n)
		}
	}
}

// revocationEffect is what the controller cannot do without one verb.
type revocationEffect struct {
	// failsAt is the step that cannot complete, and denied the request
	// ("verb resource") the API server refuses there.
	failsAt, denied string
	// setup runs before the controller starts.
	setup func(*rbacScenario)
	// polling: the verb is a watch, whose informers (one per resource, or
	// several: profiles and revisions are both ConfigMaps) fall back to
	// polling with lists. The step's change is made once each of them has
	// listed, with their lists held, and must go unseen for blindFor.
	polling bool
	// streamingOff: the verb is a list, which an informer needs only when it
	// cannot stream its list over a watch (API servers without WatchList,
	// clients with WatchListClient off). The binary runs with streaming off,
	// and its caches must never sync.
	streamingOff bool
	// reported, if set, checks how the failure shows once the request is
	// refused: it must not pass silently.
	reported func(*rbacScenario) (bool, error)
	// elsewhere: the verb is shown needed by another package's test, whose
	// controller runs cluster-wide.
	elsewhere bool
	// deploymentWrites, if set, is the controller's --deployment-writes:
	// the verb is needed in that mode.
	deploymentWrites string
}

// revocationEffects has an entry for every verb of artifacts/rbac; a verb
// without one fails TestRBACEachVerbIsNeeded, so no rule goes unjustified.
var revocationEffects = map[string]revocationEffect{
	"ClusterRole list gamesessions":          {streamingOff: true},
	"ClusterRole watch gamesessions":         {failsAt: "sync a session created later", denied: "watch gamesessions", polling: true},
	"ClusterRole update gamesessions/status": {failsAt: "write status", denied: "update gamesessions/status"},
	"ClusterRole list configmaps":            {streamingOff: true},
	"ClusterRole watch configmaps":           {failsAt: "roll a profile edit", denied: "watch configmaps", polling: true},
	"ClusterRole list deployments":           {streamingOff: true},
	"ClusterRole watch deployments":          {failsAt: "recreate a deleted Deployment", denied: "watch deployments", polling: true},
	"ClusterRole create deployments":         {failsAt: "create Deployments", denied: "create deployments"},
	"ClusterRole update deployments":         {failsAt: "roll a Secret rotation", denied: "update deployments"},
	// Patches are the writes of --deployment-writes=patch, and of auto
	// against an API server newer than the controller's API types.
	"ClusterRole patch deployments": {failsAt: "roll a Secret rotation", denied: "patch deployments", deploymentWrites: "patch"},
	"ClusterRole create events":     {failsAt: "record events", denied: "create events"},
	"ClusterRole patch events":      {failsAt: "repeat a warning", denied: "patch events"},
	"Role create leases":            {failsAt: "take the lease", denied: "create leases"},
	"Role get leases":               {failsAt: "take the lease", denied: "get leases"},
	// Without update, a first replica creates the Lease and leads until its
	// first renewal fails, 10s later. Every later leader takes over an
	// existing Lease, such as the one a predecessor released on its way
	// out: that takes an update, so without it no replica leads again.
	"Role update leases": {failsAt: "take the lease", denied: "update leases", setup: (*rbacScenario).releasedLease},
	// Without get, the controller cannot tell its own unlabelled Deployment
	// from someone else's: it leaves the Deployment alone, and the sync
	// fails and is retried with backoff.
	"ClusterRole get deployments": {failsAt: "repair a removed managed-by label", denied: "get deployments",
		reported: refusedAgain("get deployments")},
	// Without create, the Deployments have no revision to mount: no
	// session gets one. The profile sync fails on the refused create and is
	// retried with backoff. (A live session's live profile is a create
	// too, in a later step.)
	"ClusterRole create configmaps": {failsAt: "create Deployments", denied: "create configmaps",
		reported: refusedAgain("create configmaps")},
	// Without delete, every profile edit leaves a revision behind for
	// good. The profile sync fails on the refused delete and is retried
	// with backoff.
	"ClusterRole delete configmaps": {failsAt: "delete a revision no ReplicaSet mounts", denied: "delete configmaps",
		reported: refusedAgain("delete configmaps")},
	// Without list, with streaming lists off, the ProfileRollout and
	// ReplicaSet informers never sync, and the controller waits for all of
	// its caches.
	"ClusterRole list profilerollouts": {streamingOff: true},
	"ClusterRole list replicasets":     {streamingOff: true},
	// Without watch, a deleted ProfileRollout is not created again before
	// the informer's next list: nothing else tells the controller it is gone.
	"ClusterRole watch profilerollouts": {failsAt: "restore a deleted ProfileRollout", denied: "watch profilerollouts", polling: true},
	// Without create, no rollout is recorded: the profile sync fails on the
	// refused create and is retried with backoff (sessions roll all the
	// same: the steps of a profile sync fail independently).
	"ClusterRole create profilerollouts": {failsAt: "record the rollout", denied: "create profilerollouts",
		reported: refusedAgain("create profilerollouts")},
	// Without update of the status subresource, the ProfileRollout is
	// created but says nothing; the write is retried with backoff.
	"ClusterRole update profilerollouts/status": {failsAt: "record the rollout", denied: "update profilerollouts/status",
		reported: refusedAgain("update profilerollouts/status")},
	// Without get, a ConfigMap in the way of a revision goes unreported:
	// the profile sync cannot tell it from its own revision not cached
	// yet, fails and is retried with backoff. (A live delivery GETs a
	// revision only for a session behind its profile's rollout, which the
	// live steps, later, have none of: they take the profile's content
	// from its cache.)
	"ClusterRole get configmaps": {failsAt: "report a ConfigMap in a revision's way", denied: "get configmaps",
		reported: refusedAgain("get configmaps")},
	// Without watch, a ReplicaSet that stops mounting a revision goes
	// unseen until the informer's next list, and the revision stays.
	// Without list, with streaming lists off, the Secret informer never
	// syncs.
	"ClusterRole list secrets": {streamingOff: true},
	// Without watch, a rotation goes unseen until the informer's next list.
	"ClusterRole watch secrets": {failsAt: "roll a Secret rotation", denied: "watch secrets", polling: true},
	// Without get or create of its digest key, the controller cannot key the
	// Secret digests: it tries again with backoff, and syncs nothing (its
	// caches never start, and /readyz fails).
	"Role get secrets":              {failsAt: "create Deployments", denied: "get secrets", reported: refusedAgain("get secrets")},
	"Role create secrets":           {failsAt: "create Deployments", denied: "create secrets", reported: refusedAgain("create secrets")},
	"ClusterRole watch replicasets": {failsAt: "delete a revision no ReplicaSet mounts", denied: "watch replicasets", polling: true},
	// Grants are read by a cluster-wide controller only, and this
	// package's controllers each manage one namespace: test/tenancy
	// (TestGrantVerbsAreNeeded) shows these needed, with a control plane
	// of its own.
	"ClusterRole list referencegrants":  {elsewhere: true},
	"ClusterRole watch referencegrants": {elsewhere: true},
	// Without update, a live profile keeps the revision it was created
	// with: an edit of a live profile reaches no game server. The session
	// sync fails on the refused update and is retried with backoff.
	"ClusterRole update configmaps": {failsAt: "deliver a profile edit live", denied: "update configmaps",
		reported: refusedAgain("update configmaps")},
	// Without list, with streaming lists off, the live pod informer never
	// syncs.
	"ClusterRole list pods": {streamingOff: true},
	// Without watch, a game server's acknowledgment goes unseen until the
	// informer's next list: the session stays pending on the revision its
	// game server applied.
	"ClusterRole watch pods": {failsAt: "deliver a profile edit live", denied: "watch pods", polling: true},
}

// refusedAgain checks that the controller treats the refusal of key ("verb
// resource") as a failed sync, which it retries: the API server refuses the
// request again.
func refusedAgain(key string) func(*rbacScenario) (bool, error) {
	return func(s *rbacScenario) (bool, error) {
		n := s.ctl.requests.answered(key, http.StatusForbidden)
		return n >= 2, fmt.Errorf("%q refused %d times", key, n)
	}
}

// releasedLease creates the Lease as a leader leaves it when it stops
// cleanly: no holder, free to take.
func (s *rbacScenario) releasedLease() {
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: rbacLeaseName},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(""),
			LeaseDurationSeconds: ptr.To[int32](1),
			RenewTime:            &metav1.MicroTime{Time: time.Now().Add(-time.Minute)},
		},
	}
	if _, err := s.kube.CoordinationV1().Leases(s.ns).Create(s.ctx, lease, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// TestRBACEachVerbIsNeeded takes each verb of the artifacts' roles away in
// turn and shows the controller failing at the step that needs it: the API
// server refuses the request and the step's effect is missing. A verb the
// controller did not need would fail its case.
func TestRBACEachVerbIsNeeded(t *testing.T) {
	grants := loadControllerRBAC(t).grants()
	for _, g := range grants {
		if _, ok := revocationEffects[g.String()]; !ok {
			t.Errorf("%s: no expected effect in revocationEffects; every rule must be shown necessary", g)
		}
	}
	for key := range revocationEffects {
		if !slices.ContainsFunc(grants, func(g grantedVerb) bool { return g.String() == key }) {
			t.Errorf("revocationEffects has %q, which the artifacts no longer grant", key)
		}
	}
	for _, g := range grants {
		effect, ok := revocationEffects[g.String()]
		if !ok {
			continue
		}
		if effect.elsewhere {
			continue
		}
		t.Run(g.String(), func(t *testing.T) {
			if effect.streamingOff {
				listNeededWithoutStreaming(t, g)
				return
			}
			s, r := setUpRBACScenario(t, g)
			if effect.setup != nil {
				effect.setup(s)
			}
			s.startWith(r, effect.deploymentWrites, g)
			s.failsWithout(effect)
		})
	}
}

// failsWithout runs the scenario up to the step that needs the revoked verb
// and shows that step failing.
func (s *rbacScenario) failsWithout(effect revocationEffect) {
	t := s.t
	i := slices.IndexFunc(rbacSteps, func(st rbacStep) bool { return st.name == effect.failsAt })
	if i < 0 {
		t.Fatalf("no step %q", effect.failsAt)
	}
	for _, step := range rbacSteps[:i] {
		if step.act != nil {
			step.act(s)
		}
		s.eventually(step.name, func() (bool, error) { return step.done(s) })
	}
	step := rbacSteps[i]

	if effect.polling {
		resource := strings.Fields(effect.denied)[1]
		s.waitFor(fmt.Sprintf("every %s informer to poll: watch refused, a list each", resource), func() bool {
			informers, lists := s.ctl.requests.listsPerInformer(resource)
			return s.ctl.requests.answered(effect.denied, http.StatusForbidden) > 0 && informers > 0 && lists >= 1
		})
		// Polling would see the change at the next list, which client-go's
		// backoff may bring within a second (it resets two minutes after
		// the informer started): held, the lists cannot, and a reaction
		// could only come by some other way, the watch being refused.
		release := s.ctl.requests.holdLists(resource)
		step.act(s)
		deadline := time.Now().Add(blindFor)
		var why error
		for time.Now().Before(deadline) {
			var ok bool
			if ok, why = step.done(s); ok {
				t.Fatalf("step %q completed without a %s watch or list: the rule is not needed", step.name, resource)
			}
			time.Sleep(100 * time.Millisecond)
		}
		release()
		informers, lists := s.ctl.requests.listsPerInformer(resource)
		t.Logf("step %q: no reaction within %s while %d %s informer(s) poll, lists held (%d lists in all, at least %d each, watch refused %d times); %v",
			step.name, blindFor, informers, resource, s.ctl.requests.answered("list "+resource, http.StatusOK), lists,
			s.ctl.requests.answered(effect.denied, http.StatusForbidden), why)
		return
	}

	if step.act != nil {
		step.act(s)
	}
	s.waitFor(fmt.Sprintf("%q to be refused, or step %q to complete", effect.denied, step.name), func() bool {
		done, _ := step.done(s)
		return done || s.ctl.requests.answered(effect.denied, http.StatusForbidden) > 0
	})
	// The refusal is in: nothing else could have had the effect.
	if done, _ := step.done(s); done {
		t.Fatalf("step %q completed without %q: the rule is not needed", step.name, effect.denied)
	}
	_, why := step.done(s)
	t.Logf("step %q failed as expected: %q refused; %v", step.name, effect.denied, why)
	if effect.reported != nil {
		s.eventually("the failure reported", func() (bool, error) { return effect.reported(s) })
		_, how := effect.reported(s)
		t.Logf("reported: %v", how)
	}
	if step.name == "take the lease" {
		// Not leading, the controller reconciles nothing at all.
		if list, err := s.kube.AppsV1().Deployments(s.ns).List(s.ctx, metav1.ListOptions{}); err != nil || len(list.Items) > 0 {
			t.Errorf("a controller that never led created Deployments: %v %v", list, err)
		}
	}
}

// waitFor polls cond until it holds, failing the test after denialTimeout.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(denialTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %s waiting for %s", denialTimeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// listNeededWithoutStreaming runs the binary, with streaming lists off, as the
// service account without the list verb: its informers cannot fill their
// caches, so it never becomes ready and creates nothing, though it leads.
func listNeededWithoutStreaming(t *testing.T, g grantedVerb) {
	s, r := setUpRBACScenario(t, g)
	cfg := s.serviceAccountConfig(rbacServiceAccount)
	s.applyRBAC(r)
	s.waitForAuthorizer(rbacServiceAccount, r, g)
	p := s.startControllerProcess("controller", testutil.WriteKubeconfig(t, cfg),
		[]string{"KUBE_FEATURE_WatchListClient=false"},
		"--leader-elect", "--leader-election-namespace="+s.ns)

	// Only the list is revoked, so any refusal is the list's; the second
	// shows the informer retrying in vain.
	s.waitFor("two refused requests", func() bool {
		n, _ := p.Metrics(s.ctx).Sum("rest_client_requests_total", map[string]string{"code": "403", "method": "GET"})
		return n >= 2
	})
	if ok, err := rbacSteps[0].done(s); !ok {
		t.Fatalf("the controller did not lead: %v", err)
	}
	code, body := p.Readyz(s.ctx)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "caches not synced") {
		t.Errorf("/readyz = %d %q, want 503: caches not synced", code, body)
	}
	if ok, _ := s.deploymentsCarry(s.sessions[:1], s.hash); ok {
		t.Errorf("a Deployment was created without %s", g)
	}
	t.Logf("without %s: /readyz %d %q, no Deployment", g, code, strings.TrimSpace(body))

	// Granted the verb again, the same process completes its job: the list
	// was all it lacked.
	full := loadControllerRBAC(t)
	full.bindTo(t, s.ns, rbacServiceAccount)
	if _, err := s.kube.RbacV1().ClusterRoles().Update(s.ctx, full.clusterRole, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.eventually("Deployments once the list is granted", func() (bool, error) { return s.deploymentsCarry(s.sessions, s.hash) })
	if code, body := p.Readyz(s.ctx); code != http.StatusOK {
		t.Errorf("/readyz = %d %q after the list was granted, want 200", code, body)
	}
}
