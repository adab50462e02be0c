package controller

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// The summary conditions in every combination GitOps tools must tell apart:
// settled (neither), working (Reconciling) and needing a user (Stalled).
func TestSummarize(t *testing.T) {
	cond := func(conditionType string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: conditionType, Status: status, Reason: reason, Message: reason + " message"}
	}
	resolved := cond(gamesv1.ConditionProfileResolved, metav1.ConditionTrue, gamesv1.ReasonProfileResolved)
	notFound := cond(gamesv1.ConditionProfileResolved, metav1.ConditionFalse, gamesv1.ReasonProfileNotFound)
	ready := cond(gamesv1.ConditionReady, metav1.ConditionTrue, gamesv1.ReasonDeploymentReady)
	notReady := func(reason string) metav1.Condition {
		return cond(gamesv1.ConditionReady, metav1.ConditionFalse, reason)
	}
	current := cond(gamesv1.ConditionProfileUpToDate, metav1.ConditionTrue, gamesv1.ReasonRevisionCurrent)
	behind := func(reason string) metav1.Condition {
		return cond(gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, reason)
	}
	unknown := cond(gamesv1.ConditionProfileUpToDate, metav1.ConditionUnknown, gamesv1.ReasonProfileNotFound)

	tests := []struct {
		name                         string
		conditions                   []metav1.Condition
		wantStalled, wantReconciling string // reasons; "" for absent
		wantMessage                  string // "": the cause's
	}{
		{name: "settled", conditions: []metav1.Condition{resolved, ready, current}},
		{name: "settled, never rolled", conditions: []metav1.Condition{resolved, ready}},
		{name: "no status yet", conditions: nil,
			wantReconciling: gamesv1.ReasonDeploymentProgressing, wantMessage: MessageWaitingForDeployment},
		{name: "Deployment rolling", conditions: []metav1.Condition{resolved, notReady(gamesv1.ReasonDeploymentProgressing), current},
			wantReconciling: gamesv1.ReasonDeploymentProgressing},
		{name: "Deployment being deleted", conditions: []metav1.Condition{resolved, notReady(gamesv1.ReasonDeploymentDeleting)},
			wantReconciling: gamesv1.ReasonDeploymentDeleting},
		{name: "waiting for its turn", conditions: []metav1.Condition{resolved, ready, behind(gamesv1.ReasonWaitingForTurn)},
			wantReconciling: gamesv1.ReasonWaitingForTurn},
		{name: "rollout paused", conditions: []metav1.Condition{resolved, ready, behind(gamesv1.ReasonRolloutPaused)},
			wantReconciling: gamesv1.ReasonRolloutPaused},
		{name: "rollout halted", conditions: []metav1.Condition{resolved, ready, behind(gamesv1.ReasonRolloutHalted)},
			wantStalled: gamesv1.ReasonRolloutHalted},
		{name: "profile missing, no Deployment", conditions: []metav1.Condition{notFound, notReady(gamesv1.ReasonWaitingForProfile)},
			wantStalled: gamesv1.ReasonProfileNotFound},
		{name: "profile missing, game servers running", conditions: []metav1.Condition{notFound, ready, unknown},
			wantStalled: gamesv1.ReasonProfileNotFound},
		{name: "Deployment rejected", conditions: []metav1.Condition{resolved, notReady(gamesv1.ReasonDeploymentInvalid)},
			wantStalled: gamesv1.ReasonDeploymentInvalid},
		{name: "Deployment not ours", conditions: []metav1.Condition{resolved, notReady(gamesv1.ReasonDeploymentNotControlled)},
			wantStalled: gamesv1.ReasonDeploymentNotControlled},
		{name: "container conflict", conditions: []metav1.Condition{resolved, notReady(gamesv1.ReasonContainerConflict), behind(gamesv1.ReasonRolloutBlocked)},
			wantStalled: gamesv1.ReasonContainerConflict},
		{name: "progress deadline exceeded", conditions: []metav1.Condition{resolved, notReady(gamesv1.ReasonProgressDeadlineExceeded), current},
			wantStalled: gamesv1.ReasonProgressDeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			session := newSession(testNamespace, "arena-1", "classic")
			// Start from the opposite summary, so that the test also sees
			// stale summary conditions replaced or removed.
			session.Status.Conditions = append(tc.conditions,
				cond(gamesv1.ConditionStalled, metav1.ConditionTrue, "Stale"),
				cond(gamesv1.ConditionReconciling, metav1.ConditionTrue, "Stale"))
			s := newSessionStatus(session)
			s.summarize()
			wantMessage := tc.wantMessage
			if wantMessage == "" {
				wantMessage = tc.wantStalled + tc.wantReconciling + " message"
			}
			for conditionType, wantReason := range map[string]string{
				gamesv1.ConditionStalled: tc.wantStalled, gamesv1.ConditionReconciling: tc.wantReconciling,
			} {
				got := meta.FindStatusCondition(s.status.Conditions, conditionType)
				switch {
				case wantReason == "" && got != nil:
					t.Errorf("%s: got %s/%s, want absent", conditionType, got.Status, got.Reason)
				case wantReason != "" && got == nil:
					t.Errorf("%s: absent, want True/%s", conditionType, wantReason)
				case wantReason != "" && (got.Status != metav1.ConditionTrue || got.Reason != wantReason || got.Message != wantMessage):
					t.Errorf("%s: got %s/%s %q, want True/%s with its cause's message", conditionType, got.Status, got.Reason, got.Message, wantReason)
				}
			}
		})
	}
}

// A Deployment whose rollout exceeded its progress deadline fails the
// session (Stalled) instead of leaving it "progressing" forever.
func TestSyncProgressDeadlineExceededStalls(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	profile := newProfile(testNamespace, "classic", classicData)
	hash := ProfileHash(profile)
	session := settled(newSession(testNamespace, "arena-1", "classic"), hash)
	deployment := apiServerDeployment(session, hash)
	deployment.Status.ReadyReplicas = 1
	deployment.Status.Conditions = []appsv1.DeploymentCondition{{
		Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded",
	}}
	f := newFixture(ctx, t, session, profile, deployment)
	f.expectGame(updateSessionStatus(testNamespace, "arena-1"))

	_, game := f.run(ctx, sessionKey(session))
	status := objectOf[*gamesv1.GameSession](t, game[0]).Status
	expectCondition(t, status.Conditions, gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonProgressDeadlineExceeded)
	expectCondition(t, status.Conditions, gamesv1.ConditionStalled, metav1.ConditionTrue, gamesv1.ReasonProgressDeadlineExceeded)
	if meta.FindStatusCondition(status.Conditions, gamesv1.ConditionReconciling) != nil {
		t.Error("a stalled session also reports Reconciling")
	}
}

// A timed-out Progressing condition counts only for the template the
// Deployment has: the Deployment controller records a fix-forward's
// generation as observed while its condition still names the old
// ReplicaSet that timed out, until the new one makes progress.
func TestProgressDeadlineExceededNamesTheCurrentTemplate(t *testing.T) {
	mounting := func(revision string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{
			Name: profileVolumeName,
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: revision}}},
		}}}}
	}
	replicaSets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil)
	for name, revision := range map[string]string{"a-broken": "arena-1111", "a-fixed": "arena-2222"} {
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		rs.Spec.Template = mounting(revision)
		if err := replicaSets.Add(rs); err != nil {
			t.Fatal(err)
		}
	}
	c := &caches{replicaSetIndexer: replicaSets}
	deployment := func(generation, observed int64, reason, message string) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Generation: generation}}
		d.Spec.Template = mounting("arena-2222")
		d.Status.ObservedGeneration = observed
		d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing,
			Status: corev1.ConditionFalse, Reason: reason, Message: message}}
		if reason != "ProgressDeadlineExceeded" {
			d.Status.Conditions[0].Status = corev1.ConditionTrue
		}
		return d
	}
	tests := []struct {
		name string
		d    *appsv1.Deployment
		want bool
	}{
		{"the current template's ReplicaSet timed out", deployment(2, 2, "ProgressDeadlineExceeded", `ReplicaSet "a-fixed" has timed out progressing.`), true},
		{"an older template's ReplicaSet timed out", deployment(2, 2, "ProgressDeadlineExceeded", `ReplicaSet "a-broken" has timed out progressing.`), false},
		{"an earlier generation timed out", deployment(2, 1, "ProgressDeadlineExceeded", `ReplicaSet "a-fixed" has timed out progressing.`), false},
		{"a ReplicaSet the cache does not hold timed out", deployment(2, 2, "ProgressDeadlineExceeded", `ReplicaSet "a-other" has timed out progressing.`), true},
		{"a message of another form", deployment(2, 2, "ProgressDeadlineExceeded", "timed out"), true},
		{"progressing", deployment(2, 2, "ReplicaSetUpdated", `ReplicaSet "a-fixed" is progressing.`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.progressDeadlineExceeded(tt.d); got != tt.want {
				t.Errorf("progressDeadlineExceeded = %v, want %v", got, tt.want)
			}
		})
	}
}
