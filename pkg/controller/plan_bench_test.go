package controller

import (
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/example/gamesession-controller/pkg/rollout"
)

// The paced rollout of the reference scenario, as one of its plans finds it:
// 7,340 sessions of one profile with new content and max-rolling 10%, the
// first benchPlanMoved of them moved (benchPlanRolling still rolling), and
// the cluster's budget full, so that some of the profile's sessions wait in
// the ledger's fair queue among the waiters of other tenants.
const (
	benchPlanMoved            = 300
	benchPlanRolling          = 100
	benchPlanClusterPlaces    = 300
	benchPlanProfileWaiting   = 400
	benchPlanTenants          = 4
	benchPlanWaitingPerTenant = 250
)

// BenchmarkPacedPlan is one plan of that rollout (planRollout), the work a
// paced profile does at most every planInterval while its sessions change.
// With a canary, every session reads a labelled Secret, and the plan also
// picks the canaries of its rotation.
func BenchmarkPacedPlan(b *testing.B) {
	b.Run("max-rolling", func(b *testing.B) {
		benchmarkPacedPlan(b, map[string]string{rollout.AnnotationMaxRolling: "10%"})
	})
	b.Run("max-rolling+canary", func(b *testing.B) {
		benchmarkPacedPlan(b, map[string]string{rollout.AnnotationMaxRolling: "10%", rollout.AnnotationCanary: "1%"})
	})
}

func benchmarkPacedPlan(b *testing.B, annotations map[string]string) {
	ctx := klog.NewContext(b.Context(), logr.Discard())
	oldProfile := newProfile(testNamespace, "classic", classicData)
	oldHash := ProfileHash(oldProfile)
	profile := withData(oldProfile, map[string]string{"game.cfg": "new"})
	profile.Annotations = annotations
	hash := ProfileHash(profile)
	key := profileKey(testNamespace, "classic")

	f := newFixtureWithOptions(ctx, b, Options{MaxMovingSessions: benchPlanClusterPlaces}, profile)
	f.cacheRevisionOf(oldProfile)
	f.setCached(cachedSecret(b, testDigestKey, labelledSecret("blue", map[string]string{"token": "one"})))
	moves := f.c.profiles.moves
	admit := func(sessionKey string, m move) {
		moves.admit(sessionKey, m, unlimited)
	}
	for i := range benchSessions {
		s := settled(withSecretVolume(newSession(testNamespace, fmt.Sprintf("session-%05d", i), "classic"), "blue"), oldHash)
		f.setCached(s)
		d := apiServerDeployment(s, oldHash)
		if i < benchPlanMoved {
			d = apiServerDeployment(s, hash)
			if i < benchPlanRolling {
				d.Status.ReadyReplicas, d.Status.AvailableReplicas = 0, 0
				admit(sessionKey(s), move{kind: profileMove, to: hash, profile: key, named: key})
			}
		}
		f.setCached(d)
	}
	// The other tenants hold the rest of the cluster's places, and each has
	// sessions waiting; so do sessions of this profile that its plan admitted.
	tenantMoves := func(from, to int) {
		for n := range benchPlanTenants {
			namespace := fmt.Sprintf("tenant-%d", n)
			for i := from; i < to; i++ {
				admit(fmt.Sprintf("%s/session-%05d", namespace, i), move{kind: profileMove, to: "tenant", named: profileKey(namespace, "classic")})
			}
		}
	}
	tenantPlaces := (benchPlanClusterPlaces - benchPlanRolling) / benchPlanTenants
	tenantMoves(0, tenantPlaces)
	tenantMoves(tenantPlaces, tenantPlaces+benchPlanWaitingPerTenant)
	for i := range benchPlanProfileWaiting {
		admit(fmt.Sprintf("%s/session-%05d", testNamespace, benchPlanMoved+i), move{kind: profileMove, to: hash, profile: key, named: key})
	}
	if moving, waiting := moves.counts(); moving != benchPlanClusterPlaces || waiting != benchPlanTenants*benchPlanWaitingPerTenant+benchPlanProfileWaiting {
		b.Fatalf("the ledger holds %d moving and %d waiting", moving, waiting)
	}

	plan := func() *profilePlan {
		return f.c.profiles.planRollout(ctx, profile, hash, revisionState{available: true}, nil)
	}
	check := func(pp *profilePlan) {
		if pp.plan.Total != benchSessions || pp.plan.Moved != benchPlanMoved || pp.clusterBudget == nil ||
			pp.clusterBudget.WaitingSessions != benchPlanProfileWaiting || len(pp.clusterBudget.Namespaces) != 1 {
			b.Fatalf("the plan: %d members, %d moved, waiting for the cluster %+v", pp.plan.Total, pp.plan.Moved, pp.clusterBudget)
		}
	}
	// The first plan of the rollout wakes every session and announces it:
	// the benchmark's are the plans that follow.
	check(plan())
	f.events()
	drainQueue(f.c.sessions.queue)
	b.ReportAllocs()
	for b.Loop() {
		plan()
	}
	check(plan())
}
