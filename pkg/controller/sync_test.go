package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

var (
	deploymentsGroupResource = appsv1.SchemeGroupVersion.WithResource("deployments").GroupResource()
	classicData              = map[string]string{"game.cfg": "mode=classic\nmaxPlayers=32\n"}
)

func TestSyncCreatesDeployment(t *testing.T) {
	for _, tc := range []struct {
		name         string
		replicas     *int32
		wantReplicas int32
	}{
		{name: "replicas set", replicas: ptr.To[int32](3), wantReplicas: 3},
		{name: "replicas unset", replicas: nil, wantReplicas: 1},
		{name: "scaled to zero", replicas: ptr.To[int32](0), wantReplicas: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			session := newSession(testNamespace, "arena-1", "classic")
			session.Spec.Replicas = tc.replicas
			profile := newProfile(testNamespace, "classic", classicData)
			f := newFixture(ctx, t, session, profile)

			f.expectKube(createDeployment(testNamespace, "arena-1"))
			f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
			kube, game := f.run(ctx, sessionKey(session))

			d := objectOf[*appsv1.Deployment](t, kube[0])
			if d.Name != "arena-1" || d.Namespace != testNamespace {
				t.Errorf("Deployment is %s/%s, want %s/arena-1", d.Namespace, d.Name, testNamespace)
			}
			owner := metav1.GetControllerOf(d)
			if !metav1.IsControlledBy(d, session) || owner.Kind != "GameSession" ||
				owner.APIVersion != "games.example.com/v1" || !ptr.Deref(owner.BlockOwnerDeletion, false) {
				t.Errorf("Deployment controller reference: got %+v, want GameSession %s", d.OwnerReferences, session.UID)
			}
			wantLabels := map[string]string{
				"app.kubernetes.io/name":       "gamesession",
				"app.kubernetes.io/instance":   "arena-1",
				"app.kubernetes.io/managed-by": "gamesession-controller",
			}
			for what, labels := range map[string]map[string]string{
				"Deployment": d.Labels, "pod template": d.Spec.Template.Labels,
			} {
				if !equality.Semantic.DeepEqual(labels, wantLabels) {
					t.Errorf("%s labels: got %v, want %v", what, labels, wantLabels)
				}
			}
			// The selector is immutable: it must not include managed-by, which
			// is about the Deployment, not the pods' identity.
			if want := map[string]string{"app.kubernetes.io/name": "gamesession", "app.kubernetes.io/instance": "arena-1"}; !equality.Semantic.DeepEqual(d.Spec.Selector.MatchLabels, want) {
				t.Errorf("selector: got %v, want %v", d.Spec.Selector.MatchLabels, want)
			}
			if got := ptr.Deref(d.Spec.Replicas, -1); got != tc.wantReplicas {
				t.Errorf("replicas: got %d, want %d", got, tc.wantReplicas)
			}
			tmpl := d.Spec.Template
			if got, want := tmpl.Annotations["games.example.com/profile-hash"], ProfileHash(profile); got != want {
				t.Errorf("profile hash annotation: got %q, want %q", got, want)
			}
			if len(tmpl.Spec.Containers) != 1 {
				t.Fatalf("got %d containers, want 1", len(tmpl.Spec.Containers))
			}
			container := tmpl.Spec.Containers[0]
			if container.Image != testImage {
				t.Errorf("image: got %q, want %q", container.Image, testImage)
			}
			if len(container.VolumeMounts) != 1 || len(tmpl.Spec.Volumes) != 1 {
				t.Fatalf("got mounts %+v and volumes %+v, want one of each", container.VolumeMounts, tmpl.Spec.Volumes)
			}
			mount, volume := container.VolumeMounts[0], tmpl.Spec.Volumes[0]
			if mount.Name != volume.Name || mount.MountPath != "/etc/gamesession/profile" || !mount.ReadOnly {
				t.Errorf("profile mount: got %+v, want volume %q read-only at /etc/gamesession/profile", mount, volume.Name)
			}
			if want := RevisionName("classic", ProfileHash(profile)); volume.ConfigMap == nil || volume.ConfigMap.Name != want {
				t.Errorf("profile volume: got %+v, want ConfigMap %s", volume.VolumeSource, want)
			}
			if ptr.Deref(tmpl.Spec.AutomountServiceAccountToken, true) {
				t.Error("game servers get a service account token")
			}

			status := objectOf[*gamesv1.GameSession](t, game[0]).Status
			expectCondition(t, status.Conditions, gamesv1.ConditionProfileResolved, metav1.ConditionTrue, gamesv1.ReasonProfileResolved)
			// Just created: nothing is ready yet.
			expectCondition(t, status.Conditions, gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonDeploymentProgressing)
			if status.ProfileHash != ProfileHash(profile) {
				t.Errorf("status.profileHash: got %q, want %q", status.ProfileHash, ProfileHash(profile))
			}
			if status.ObservedGeneration != session.Generation {
				t.Errorf("status.observedGeneration: got %d, want %d", status.ObservedGeneration, session.Generation)
			}
			if want := "app.kubernetes.io/instance=arena-1,app.kubernetes.io/name=gamesession"; status.Selector != want {
				t.Errorf("status.selector: got %q, want %q", status.Selector, want)
			}
			f.expectEvents(`Normal DeploymentCreated Created Deployment "arena-1"`)
		})
	}
}

// others' additions decorates a Deployment the way other actors do; none of it
// is the controller's business, so it must neither trigger nor be lost in a
// write.
func addOthersChanges(d *appsv1.Deployment) {
	d.Labels["team"] = "blue"
	d.Annotations["team.example.com/owner"] = "ops"
	// kubectl rollout restart
	d.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = "2026-03-01T12:30:00Z"
}

// addHandEdits edits the pod template of d by hand, as someone might to get
// what the session does not say: an env var, a sidecar, a volume. The
// session is the template's source of truth, and a sync undoes them.
func addHandEdits(d *appsv1.Deployment) {
	tmpl := &d.Spec.Template.Spec
	tmpl.Containers = append(tmpl.Containers, corev1.Container{Name: "log-shipper", Image: "fluent-bit:3"})
	tmpl.Containers[0].Env = append(tmpl.Containers[0].Env, corev1.EnvVar{Name: "REGION", Value: "eu"})
	tmpl.Volumes = append(tmpl.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
}

// rollingOut checks the status of a session whose Deployment was just
// updated: the Deployment controller has not seen the new spec yet.
func rollingOut(t *testing.T, s gamesv1.GameSessionStatus) {
	t.Helper()
	expectCondition(t, s.Conditions, gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonDeploymentProgressing)
}

func TestSyncUpdatesDeployment(t *testing.T) {
	oldProfile := newProfile(testNamespace, "classic", classicData)
	newData := map[string]string{"game.cfg": "mode=classic\nmaxPlayers=64\n"}
	tests := []struct {
		name string
		// change makes the change, on copies, and returns what the sync sees.
		change func(s *gamesv1.GameSession) (*gamesv1.GameSession, *corev1.ConfigMap)
		// want applies the change to the observed Deployment: exactly this,
		// and nothing else, must differ in the update.
		want       func(d *appsv1.Deployment)
		wantStatus func(t *testing.T, s gamesv1.GameSessionStatus)
		wantEvents []string
	}{
		{
			name: "image",
			change: func(s *gamesv1.GameSession) (*gamesv1.GameSession, *corev1.ConfigMap) {
				s.Spec.Image = "registry.example.com/arena:1.5.0"
				return s, oldProfile
			},
			want: func(d *appsv1.Deployment) {
				d.Spec.Template.Spec.Containers[0].Image = "registry.example.com/arena:1.5.0"
			},
			wantStatus: rollingOut,
		},
		{
			name: "replicas",
			change: func(s *gamesv1.GameSession) (*gamesv1.GameSession, *corev1.ConfigMap) {
				s.Spec.Replicas = ptr.To[int32](5)
				return s, oldProfile
			},
			want: func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](5) },
			wantStatus: func(t *testing.T, s gamesv1.GameSessionStatus) {
				c := expectCondition(t, s.Conditions, gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonDeploymentProgressing)
				if want := fmt.Sprintf(MessageDeploymentRolling, 3, 5, 3); c.Message != want {
					t.Errorf("Ready message: got %q, want %q", c.Message, want)
				}
			},
		},
		{
			name: "resources",
			change: func(s *gamesv1.GameSession) (*gamesv1.GameSession, *corev1.ConfigMap) {
				s.Spec.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1Gi")
				return s, oldProfile
			},
			want: func(d *appsv1.Deployment) {
				d.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1Gi")
			},
			wantStatus: rollingOut,
		},
		{
			name: "profile data",
			change: func(s *gamesv1.GameSession) (*gamesv1.GameSession, *corev1.ConfigMap) {
				return s, withData(oldProfile, newData)
			},
			want: func(d *appsv1.Deployment) {
				hash := ProfileHash(withData(oldProfile, newData))
				d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] = hash
				findByName(d.Spec.Template.Spec.Volumes, profileVolumeName).ConfigMap.Name = RevisionName("classic", hash)
			},
			wantStatus: func(t *testing.T, s gamesv1.GameSessionStatus) {
				want := ProfileHash(withData(oldProfile, newData))
				if s.ProfileHash != want {
					t.Errorf("status.profileHash: got %q, want %q", s.ProfileHash, want)
				}
				c := expectCondition(t, s.Conditions, gamesv1.ConditionProfileResolved, metav1.ConditionTrue, gamesv1.ReasonProfileResolved)
				if !strings.Contains(c.Message, want) || !c.LastTransitionTime.Equal(&lastTransition) {
					t.Errorf("ProfileResolved: got %q at %v, want the new hash and the old transition time", c.Message, c.LastTransitionTime)
				}
				rollingOut(t, s)
			},
			// No Event per session: the profile's rollout Events and the
			// session's ProfileUpToDate condition say it.
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			session := settled(newSession(testNamespace, "arena-1", "classic"), ProfileHash(oldProfile))
			observed := apiServerDeployment(session, ProfileHash(oldProfile))
			addOthersChanges(observed)
			changed, profile := tc.change(session.DeepCopy())
			f := newFixture(ctx, t, changed, profile, observed)

			f.expectKube(writeDeployment(testNamespace, "arena-1"))
			if tc.wantStatus != nil {
				f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
			}
			_, game := f.run(ctx, sessionKey(session))

			want := observed.DeepCopy()
			tc.want(want)
			got := f.storedDeployment(testNamespace, "arena-1")
			// Everything but what the API server maintains (resourceVersion,
			// generation, managedFields) must be as before but for the change.
			if !equality.Semantic.DeepEqual(got.Spec, want.Spec) {
				t.Errorf("the write changed more than %s: stored spec\n%+v\nwant\n%+v", tc.name, got.Spec, want.Spec)
			}
			if !equality.Semantic.DeepEqual(got.Labels, want.Labels) || !equality.Semantic.DeepEqual(got.Annotations, want.Annotations) ||
				!equality.Semantic.DeepEqual(got.OwnerReferences, want.OwnerReferences) || !equality.Semantic.DeepEqual(got.Status, want.Status) {
				t.Errorf("the write changed the Deployment's metadata or status: got\n%+v\nwant\n%+v", got.ObjectMeta, want.ObjectMeta)
			}
			if tc.wantStatus != nil {
				tc.wantStatus(t, objectOf[*gamesv1.GameSession](t, game[0]).Status)
			}
			f.expectEvents(tc.wantEvents...)
		})
	}
}

// The property that lets thousands of sessions resync idly: a session whose
// Deployment and status are in order makes no request and records no event.
func TestSyncNoOp(t *testing.T) {
	profile := newProfile(testNamespace, "classic", classicData)
	hash := ProfileHash(profile)
	tests := []struct {
		name   string
		modify func(s *gamesv1.GameSession, d *appsv1.Deployment)
	}{
		{name: "as the API server returns it", modify: func(*gamesv1.GameSession, *appsv1.Deployment) {}},
		{name: "others' additions", modify: func(_ *gamesv1.GameSession, d *appsv1.Deployment) { addOthersChanges(d) }},
		{
			name: "replicas left to the default",
			modify: func(s *gamesv1.GameSession, d *appsv1.Deployment) {
				s.Spec.Replicas = nil
				*s = *settled(s, hash)
				*d = *apiServerDeployment(s, hash)
			},
		},
		{
			// The CRD defaults the protocol; an object that bypassed defaulting
			// must still match the Deployment.
			name:   "port protocol left to the default",
			modify: func(s *gamesv1.GameSession, _ *appsv1.Deployment) { s.Spec.Ports[0].Protocol = "" },
		},
		{
			name: "quantities written differently",
			modify: func(s *gamesv1.GameSession, _ *appsv1.Deployment) {
				s.Spec.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("0.5")
				s.Spec.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("536870912")
			},
		},
		{
			name: "no ports, no resources",
			modify: func(s *gamesv1.GameSession, d *appsv1.Deployment) {
				s.Spec.Ports, s.Spec.Resources = nil, gamesv1.GameServerResources{}
				*d = *apiServerDeployment(s, hash)
			},
		},
		{
			name: "rolling out, already reported",
			modify: func(s *gamesv1.GameSession, d *appsv1.Deployment) {
				d.Status.ReadyReplicas, d.Status.UpdatedReplicas = 1, 2
				s.Status.ReadyReplicas, s.Status.UpdatedReplicas = 1, 2
				ready := &s.Status.Conditions[1]
				ready.Status, ready.Reason = metav1.ConditionFalse, gamesv1.ReasonDeploymentProgressing
				ready.Message = fmt.Sprintf(MessageDeploymentRolling, 1, 3, 2)
				s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{
					Type: gamesv1.ConditionReconciling, Status: metav1.ConditionTrue,
					Reason: ready.Reason, Message: ready.Message, ObservedGeneration: s.Generation,
				})
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			session := settled(newSession(testNamespace, "arena-1", "classic"), hash)
			deployment := apiServerDeployment(session, hash)
			tc.modify(session, deployment)
			f := newFixture(ctx, t, session, profile, deployment)

			f.run(ctx, sessionKey(session)) // no request expected
			f.expectEvents()
		})
	}
}

// The no-op property end to end: the writes of a first sync, read back as the
// informers would deliver them, leave the second sync nothing to do.
func TestSyncAfterCreateIsNoOp(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	session := newSession(testNamespace, "arena-1", "classic")
	f := newFixture(ctx, t, session, newProfile(testNamespace, "classic", classicData))

	f.expectKube(createDeployment(testNamespace, "arena-1"))
	f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
	kube, game := f.run(ctx, sessionKey(session))
	f.observe(append(kube, game...)...)
	f.events()

	f.run(ctx, sessionKey(session))
	f.expectEvents()
}

func TestSyncDeploymentNotControlled(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(d *appsv1.Deployment)
	}{
		{name: "another controller", modify: func(d *appsv1.Deployment) {
			d.OwnerReferences = []metav1.OwnerReference{{
				APIVersion: "example.com/v1", Kind: "Arena", Name: "arena-1", UID: "other", Controller: ptr.To(true),
			}}
		}},
		{name: "no controller", modify: func(d *appsv1.Deployment) { d.OwnerReferences[0].Controller = nil }},
		// A previous session's Deployment is not reported as foreign: the
		// garbage collector is about to delete it (see
		// TestRecreatedSessionGetsDeploymentWhenPredecessorsIsDeleted).
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			profile := newProfile(testNamespace, "classic", classicData)
			session := newSession(testNamespace, "arena-1", "classic")
			foreign := apiServerDeployment(session, "somebody-elses")
			tc.modify(foreign)
			f := newFixture(ctx, t, session, profile, foreign)

			f.expectGame(updateSessionStatus(testNamespace, "arena-1")) // and no Deployment request
			_, game := f.run(ctx, sessionKey(session))
			c := expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
				gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonDeploymentNotControlled)
			if !strings.Contains(c.Message, `"arena-1"`) {
				t.Errorf("Ready message %q does not name the Deployment", c.Message)
			}
			f.expectEvents("Warning DeploymentNotControlled")

			// Reported once: the next sync finds the status in order.
			f.observe(game...)
			f.run(ctx, sessionKey(session))
			f.expectEvents()
		})
	}
}

// A Deployment of the session's name that is not in the controller's
// label-filtered cache answers the create with AlreadyExists. The controller
// reads it live, once, to see whose it is: a foreign one is reported and left
// alone; its own, stripped of the managed-by label (or created moments ago
// and not yet in the cache), is patched back into shape.
func TestSyncCreateAlreadyExists(t *testing.T) {
	profile := newProfile(testNamespace, "classic", classicData)
	for _, tc := range []struct {
		name       string
		live       func(s *gamesv1.GameSession) *appsv1.Deployment
		wantKube   []wantAction
		wantReady  metav1.ConditionStatus
		wantReason string
		wantEvents []string
	}{
		{
			name: "foreign, unlabelled",
			live: func(s *gamesv1.GameSession) *appsv1.Deployment {
				d := apiServerDeployment(s, "somebody-elses")
				d.OwnerReferences, d.Labels = nil, map[string]string{"app": "other"}
				return d
			},
			wantKube:   []wantAction{createDeployment(testNamespace, "arena-1"), getDeployment(testNamespace, "arena-1")},
			wantReason: gamesv1.ReasonDeploymentNotControlled,
			wantEvents: []string{"Warning DeploymentNotControlled"},
		},
		{
			name: "ours, managed-by label removed",
			live: func(s *gamesv1.GameSession) *appsv1.Deployment {
				d := apiServerDeployment(s, ProfileHash(profile))
				delete(d.Labels, LabelManagedBy)
				return d
			},
			// The label is put back; the pod template, and so the pods, stay.
			wantKube: []wantAction{createDeployment(testNamespace, "arena-1"), getDeployment(testNamespace, "arena-1"),
				writeDeployment(testNamespace, "arena-1")},
			wantReady:  metav1.ConditionTrue,
			wantReason: gamesv1.ReasonDeploymentReady,
		},
		{
			name:       "ours, not yet in the cache",
			live:       func(s *gamesv1.GameSession) *appsv1.Deployment { return apiServerDeployment(s, ProfileHash(profile)) },
			wantKube:   []wantAction{createDeployment(testNamespace, "arena-1"), getDeployment(testNamespace, "arena-1")},
			wantReady:  metav1.ConditionTrue,
			wantReason: gamesv1.ReasonDeploymentReady,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			session := newSession(testNamespace, "arena-1", "classic")
			f := newFixture(ctx, t, session, profile)
			if err := f.kubeClient.Tracker().Add(tc.live(session)); err != nil {
				t.Fatal(err)
			}

			f.expectKube(tc.wantKube...)
			f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
			_, game := f.run(ctx, sessionKey(session))
			if tc.wantReady == "" {
				tc.wantReady = metav1.ConditionFalse
			}
			expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
				gamesv1.ConditionReady, tc.wantReady, tc.wantReason)
			f.expectEvents(tc.wantEvents...)
			if tc.wantReason == gamesv1.ReasonDeploymentNotControlled {
				if d := f.storedDeployment(testNamespace, "arena-1"); d.Labels["app"] != "other" || len(d.OwnerReferences) != 0 {
					t.Errorf("the foreign Deployment was modified: %+v", d.ObjectMeta)
				}
				return
			}
			if d := f.storedDeployment(testNamespace, "arena-1"); d.Labels[LabelManagedBy] != ManagedByValue {
				t.Errorf("managed-by label not restored: %v", d.Labels)
			}
		})
	}
}

// A Deployment that changed since the cache saw it is never patched on the
// strength of the stale copy: another Deployment that took the name since, or
// ours, orphaned by the garbage collector a moment ago. The patch names the
// resourceVersion it was computed from, the API server refuses it, and the
// sync retries once the cache has caught up.
func TestSyncNeverPatchesAChangedDeployment(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	profile := newProfile(testNamespace, "classic", classicData)
	session := newSession(testNamespace, "arena-1", "classic")
	cached := apiServerDeployment(session, "old-hash")
	f := newFixture(ctx, t, session, profile)
	f.setCached(cached)
	newcomer := cached.DeepCopy()
	newcomer.UID = "someone-elses"
	newcomer.OwnerReferences = nil
	newcomer.ResourceVersion = bumpVersion(cached.ResourceVersion)
	if err := f.kubeClient.Tracker().Add(newcomer); err != nil {
		t.Fatal(err)
	}

	f.expectKube(writeDeployment(testNamespace, "arena-1"))
	_, _, err := f.runWithError(ctx, sessionKey(session))
	if !apierrors.IsConflict(err) {
		t.Errorf("sync error = %v, want a conflict (retried quietly)", err)
	}
	if d := f.storedDeployment(testNamespace, "arena-1"); d.UID != "someone-elses" || d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] != "old-hash" {
		t.Errorf("the newcomer was modified: %+v", d.ObjectMeta)
	}
}

func TestSyncProfileMissingThenAppearing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	session := newSession(testNamespace, "arena-1", "classic")
	f := newFixture(ctx, t, session)

	f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
	_, game := f.run(ctx, sessionKey(session))
	status := objectOf[*gamesv1.GameSession](t, game[0]).Status
	c := expectCondition(t, status.Conditions, gamesv1.ConditionProfileResolved, metav1.ConditionFalse, gamesv1.ReasonProfileNotFound)
	for _, want := range []string{`"classic"`, testProfileSelector, testNamespace} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("ProfileNotFound message %q does not mention %q", c.Message, want)
		}
	}
	expectCondition(t, status.Conditions, gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonWaitingForProfile)
	f.expectEvents("Warning ProfileNotFound")

	t.Log("still missing: reported once")
	f.observe(game...)
	f.run(ctx, sessionKey(session))
	f.expectEvents()

	t.Log("the profile appears")
	profile := newProfile(testNamespace, "classic", classicData)
	f.setCached(profile)
	f.expectKube(createDeployment(testNamespace, "arena-1"))
	f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
	kube, game := f.run(ctx, sessionKey(session))
	if got := objectOf[*appsv1.Deployment](t, kube[0]).Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]; got != ProfileHash(profile) {
		t.Errorf("profile hash annotation: got %q, want %q", got, ProfileHash(profile))
	}
	status = objectOf[*gamesv1.GameSession](t, game[0]).Status
	expectCondition(t, status.Conditions, gamesv1.ConditionProfileResolved, metav1.ConditionTrue, gamesv1.ReasonProfileResolved)
	expectCondition(t, status.Conditions, gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonDeploymentProgressing)
	f.expectEvents("Normal DeploymentCreated", "Normal ProfileResolved")
}

// A running game server is never changed for a bad profile.
func TestSyncProfileDeletedLeavesDeployment(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	profile := newProfile(testNamespace, "classic", classicData)
	session := settled(newSession(testNamespace, "arena-1", "classic"), ProfileHash(profile))
	f := newFixture(ctx, t, session, apiServerDeployment(session, ProfileHash(profile)))

	f.expectGame(updateSessionStatus(testNamespace, "arena-1")) // and no Deployment request
	_, game := f.run(ctx, sessionKey(session))
	status := objectOf[*gamesv1.GameSession](t, game[0]).Status
	expectCondition(t, status.Conditions, gamesv1.ConditionProfileResolved, metav1.ConditionFalse, gamesv1.ReasonProfileNotFound)
	// The game servers still run, and say so.
	expectCondition(t, status.Conditions, gamesv1.ConditionReady, metav1.ConditionTrue, gamesv1.ReasonDeploymentReady)
	if status.ProfileHash != ProfileHash(profile) {
		t.Errorf("status.profileHash: got %q, want the hash still rolled out, %q", status.ProfileHash, ProfileHash(profile))
	}
	f.expectEvents("Warning ProfileNotFound")

	f.observe(game...)
	f.run(ctx, sessionKey(session))
	f.expectEvents()
}

// An Invalid error cannot be fixed by retrying: the sync reports it on the
// session and returns nil, so the key is not retried until the spec changes.
func TestSyncDeploymentInvalid(t *testing.T) {
	invalid := apierrors.NewInvalid(appsv1.SchemeGroupVersion.WithKind("Deployment").GroupKind(), "arena-1",
		field.ErrorList{field.Invalid(field.NewPath("spec", "template", "spec", "containers").Index(0).Child("image"), " ", "must not be blank")})
	profile := newProfile(testNamespace, "classic", classicData)
	for _, tc := range []struct {
		name  string
		verbs []string
		// objects besides the profile
		objects func() []runtime.Object
		want    wantAction
	}{
		{
			name: "create", verbs: []string{"create"}, want: createDeployment(testNamespace, "arena-1"),
			objects: func() []runtime.Object { return []runtime.Object{newSession(testNamespace, "arena-1", "classic")} },
		},
		{
			name: "update", verbs: []string{"update", "patch"}, want: writeDeployment(testNamespace, "arena-1"),
			objects: func() []runtime.Object {
				s := settled(newSession(testNamespace, "arena-1", "classic"), ProfileHash(profile))
				d := apiServerDeployment(s, ProfileHash(profile))
				s.Spec.Image = "registry.example.com/arena:2.0"
				return []runtime.Object{s, d}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(ctx, t, append(tc.objects(), profile)...)
			for _, verb := range tc.verbs {
				f.kubeClient.PrependReactor(verb, "deployments", func(core.Action) (bool, runtime.Object, error) {
					return true, nil, invalid
				})
			}

			f.expectKube(tc.want)
			f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
			_, game := f.run(ctx, "arena/arena-1") // fails the test if the sync returns the error
			c := expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
				gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonDeploymentInvalid)
			if !strings.Contains(c.Message, "must not be blank") {
				t.Errorf("Ready message %q does not quote the API server's reason", c.Message)
			}
			f.expectEvents("Warning DeploymentInvalid")
		})
	}
}

// Other write errors are returned, so the key is retried with backoff, and
// nothing is reported on the session for what is likely transient.
func TestSyncReturnsTransientErrors(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	session := newSession(testNamespace, "arena-1", "classic")
	f := newFixture(ctx, t, session, newProfile(testNamespace, "classic", classicData))
	f.kubeClient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is sad")
	})

	f.expectKube(createDeployment(testNamespace, "arena-1"))
	_, _, err := f.runWithError(ctx, sessionKey(session))
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("sync returned %v, want the ServiceUnavailable error", err)
	}
	f.expectEvents()
}

func TestSyncStatusConflictIsReturned(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	session := newSession(testNamespace, "arena-1", "classic")
	f := newFixture(ctx, t, session)
	f.gameClient.PrependReactor("update", "gamesessions", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(gamesv1.Resource("gamesessions"), "arena-1", errors.New("stale"))
	})

	f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
	_, _, err := f.runWithError(ctx, sessionKey(session))
	if !apierrors.IsConflict(err) {
		t.Errorf("sync returned %v, want the conflict, for handleErr to retry", err)
	}
	f.events()
}

func TestSyncDeletedSessionOrBadKey(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(ctx, t, newProfile(testNamespace, "classic", classicData))

	f.run(ctx, "arena/gone") // no request
	f.expectEvents()

	if _, _, err := f.runWithError(ctx, "a/b/c"); err == nil {
		t.Error("sync of a malformed key returned nil")
	}
}

// A session being deleted in the foreground waits for the garbage collector
// to delete its Deployment; the controller must not create a new one, which
// would be deleted again, over and over, while the session lingers.
func TestSyncSessionBeingDeletedGetsNoDeployment(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	session := newSession(testNamespace, "arena-1", "classic")
	session.DeletionTimestamp = &lastTransition
	session.Finalizers = []string{metav1.FinalizerDeleteDependents}
	f := newFixture(ctx, t, session, newProfile(testNamespace, "classic", classicData))

	f.run(ctx, sessionKey(session)) // no request at all
	f.expectEvents()
}

// The cache never saw a Deployment the controller created before someone
// deleted it. Nothing remembers the create: the next sync finds no Deployment
// in the cache and creates it again.
func TestSyncRecreatesDeploymentDeletedBeforeTheCacheSawIt(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	session := newSession(testNamespace, "arena-1", "classic")
	f := newFixture(ctx, t, session, newProfile(testNamespace, "classic", classicData))

	f.expectKube(createDeployment(testNamespace, "arena-1"))
	f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
	_, game := f.run(ctx, sessionKey(session))
	f.observe(game...)
	f.events()
	if err := f.kubeClient.Tracker().Delete(appsv1.SchemeGroupVersion.WithResource("deployments"), testNamespace, "arena-1"); err != nil {
		t.Fatal(err)
	}

	f.expectKube(createDeployment(testNamespace, "arena-1"))
	f.run(ctx, sessionKey(session))
	f.expectEvents("Normal " + EventReasonCreated)
}

// Scaled while its profile is missing: the Deployment is left as it was, so
// the session must not claim Ready for the new replica count.
func TestSyncSpecChangeWhileProfileMissingIsNotReady(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	profile := newProfile(testNamespace, "classic", classicData)
	running := settled(newSession(testNamespace, "arena-1", "classic"), ProfileHash(profile))
	deployment := apiServerDeployment(running, ProfileHash(profile))
	scaled := running.DeepCopy()
	scaled.Spec.Replicas = ptr.To[int32](4)
	scaled.Generation++
	f := newFixture(ctx, t, scaled, deployment) // no profile

	f.expectGame(updateSessionStatus(testNamespace, "arena-1")) // and no Deployment request
	_, game := f.run(ctx, sessionKey(scaled))
	status := objectOf[*gamesv1.GameSession](t, game[0]).Status
	c := expectCondition(t, status.Conditions, gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonWaitingForProfile)
	if want := fmt.Sprintf(MessageSpecWaitsForProfile, "classic", 3, 3); c.Message != want {
		t.Errorf("Ready message: got %q, want %q", c.Message, want)
	}
	if status.ObservedGeneration != scaled.Generation || c.ObservedGeneration != scaled.Generation {
		t.Errorf("observedGeneration %d (condition %d), want %d", status.ObservedGeneration, c.ObservedGeneration, scaled.Generation)
	}
}

// The session is the source of truth for the pod template: a renamed game
// server container is put back under its name, in one write, and not joined
// by a twin on the same ports.
func TestSyncRenamedContainerIsRestoredWithoutTwin(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	profile := newProfile(testNamespace, "classic", classicData)
	session := settled(newSession(testNamespace, "arena-1", "classic"), ProfileHash(profile))
	renamed := apiServerDeployment(session, ProfileHash(profile))
	renamed.Spec.Template.Spec.Containers[0].Name = "server"
	f := newFixture(ctx, t, session, profile, renamed)

	f.expectKube(writeDeployment(testNamespace, "arena-1"))
	f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
	f.run(ctx, sessionKey(session))
	got := f.storedDeployment(testNamespace, "arena-1").Spec.Template.Spec.Containers
	if len(got) != 1 || got[0].Name != defaultGameServerContainer {
		t.Errorf("containers after the sync: %+v, want the game server alone, under its name", got)
	}
}

// orphanedBeforeCached creates session arena-1's Deployment, which the cache
// does not show yet, and has the garbage collector orphan it (propagation
// Orphan): the session is still cached, its profile keeps no revision for
// history. It returns the orphaned Deployment as the server now has it.
func orphanedBeforeCached(t *testing.T) (context.Context, *fixture, *gamesv1.GameSession, *corev1.ConfigMap, *appsv1.Deployment) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	session := newSession(testNamespace, "arena-1", "classic")
	profile := newProfile(testNamespace, "classic", classicData)
	f := newFixture(ctx, t, session, profile)
	f.c.profiles.revisionHistoryLimit = 0

	f.expectKube(createDeployment(testNamespace, "arena-1"))
	f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
	f.run(ctx, sessionKey(session)) // the cache does not show the Deployment yet
	f.events()

	orphaned := f.storedDeployment(testNamespace, "arena-1")
	orphaned.OwnerReferences = nil
	orphaned.ResourceVersion = bumpVersion(orphaned.ResourceVersion) // the fake tracker keeps what it is given
	if err := f.kubeClient.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("deployments"), orphaned, testNamespace); err != nil {
		t.Fatal(err)
	}
	return ctx, f, session, profile, orphaned
}

// A session deleted with orphan propagation leaves its Deployment, and its
// pods, running. Until the cache shows that Deployment, the create that made
// it keeps the revision it mounts, though the profile has moved on, and a
// successor of the session's name, which that Deployment blocks, does not
// let go of it by its live read. Once the cache shows the Deployment, the
// revision's profile looks again.
func TestSyncOrphanedDeploymentKeepsItsRevisionUntilCached(t *testing.T) {
	// The garbage collector orphans the Deployment and the session goes.
	ctx, f, session, profile, orphaned := orphanedBeforeCached(t)
	f.deleteCached(session)
	f.run(ctx, sessionKey(session)) // no request

	successor := newSession(testNamespace, "arena-1", "classic")
	successor.UID = "successor"
	f.setCached(successor)
	f.expectKube(createDeployment(testNamespace, "arena-1"), getDeployment(testNamespace, "arena-1"))
	f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
	f.run(ctx, sessionKey(successor))
	f.expectEvents("Warning " + gamesv1.ReasonDeploymentNotControlled)

	// The profile moves on: its first revision is neither current nor kept
	// for history, and only the orphaned Deployment mounts it.
	f.setCached(withData(profile, map[string]string{"game.cfg": "new"}))
	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic") // no delete
	f.events()

	drainQueue(f.c.profiles.queue)
	f.setCached(orphaned)
	f.c.sessions.addDeployment(orphaned)
	if got := waitForProfileKeys(f.c); !slices.Equal(got, []string{"arena/classic"}) {
		t.Errorf("profile queue %v once the cache shows the orphaned Deployment, want its revision's profile", got)
	}
}

// A create answered 500 may have been made, so the revision it mounts is
// kept for it. Made or not, the cache may never show it: when it stops
// delaying the revision (expectationTimeout), the profile sync that kept the
// revision for it looks again, rather than leave it to the next resync.
func TestSyncLostCreateAnswerHoldsItsRevisionUntilItExpires(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(lastTransition.Time)
	session := newSession(testNamespace, "arena-1", "classic")
	profile := newProfile(testNamespace, "classic", classicData)
	f := newFixtureWithOptions(ctx, t, Options{Clock: clk}, session, profile)
	revision := RevisionName("classic", ProfileHash(profile))
	f.kubeClient.PrependReactor("create", "deployments", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
	})

	f.expectKube(createDeployment(testNamespace, "arena-1"))
	if _, _, err := f.runWithError(ctx, sessionKey(session)); !apierrors.IsInternalError(err) {
		t.Fatalf("sync returned %v, want the 500", err)
	}

	// The profile goes: only a revision a pod may mount stays.
	f.deleteCached(profile)
	f.runProfile(ctx, "arena/classic") // no delete
	drainQueue(f.c.profiles.queue)
	// The session's retry wrote its status (its profile is missing): it is
	// accounted for, and only the create's expectation keeps the revision
	// (revisionsOutOfSight).
	session = session.DeepCopy()
	session.Status.ObservedGeneration = session.Generation
	session.Status.Conditions = []metav1.Condition{{Type: gamesv1.ConditionReady, Status: metav1.ConditionFalse, Reason: gamesv1.ReasonWaitingForProfile}}
	f.setCached(session)

	clk.Step(expectationTimeout + time.Second)
	if got := waitForProfileKeys(f.c); !slices.Equal(got, []string{"arena/classic"}) {
		t.Fatalf("profile queue %v once the create's hold expired, want its revision's profile", got)
	}
	f.expectKube(deleteConfigMap(testNamespace, revision))
	f.runProfile(ctx, "arena/classic")
}
