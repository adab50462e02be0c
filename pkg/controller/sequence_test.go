package controller

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	gamesfake "github.com/example/gamesession-controller/pkg/generated/clientset/versioned/fake"
)

// A sequence is a few dozen seeded, randomly chosen steps of a small world
// (three session names, two profile names, one namespace) around one
// controller, followed by a settling phase and the invariants. A third of the
// sequences are paced: their profiles carry rollout policies (canary, budget,
// brake, pause, invalid values), edited mid-rollout, and some content never
// gets Ready:
//
//	world := newWorld(seed)          // API server, clients, clock
//	world.startController()          // caches filled from the server
//	for each step: world.act()       // a user, the GC, kcm, a fault, a
//	                                 // restart, an informer delivery, a
//	                                 // session sync, a profile sync...
//	world.settle()                   // deliver everything, run both queues dry
//	world.checkAtRest(); world.checkIdle()
//
// Invariants about requests (what the controller may write, and when) are
// checked as they are made. Each sequence depends on its seed alone, so a
// failure prints the command that replays it with its event log.
//
// The pieces: world_server_test.go and world_defaults_test.go (the API
// server), world_clients_test.go and world_configmapget_test.go (the
// controller's requests), world_caches_test.go (informer delivery, the same
// event handlers NewController registers), world_queue_test.go (the work
// queues and the clock), world_cluster_test.go (the garbage collector),
// world_kcm_test.go (a kube-controller-manager stand-in: ReplicaSets and
// their pods, observedGeneration, progress deadlines, paused Deployments),
// world_revisions_test.go (profile revisions: the requests that create and
// delete them, and what must hold of them), world_rollout_test.go (paced
// policies, ProfileRollouts, the budget, the halt, what a rollout must show
// at rest), world_inputs_test.go (Secrets and session-config ConfigMaps,
// one table of the kinds of referenced input and one set of checks for
// them), world_inputcanary_test.go (the canary of a rotation: what the
// caches showed of its canaries and of data run Ready, the sequences of
// canary rotations, and the rotations at rest that end them),
// world_live_test.go (live delivery: the sessions' live profiles, the pods
// of live templates and their game servers' acknowledgments, and what must
// hold of them), sequence_actions_test.go (what a step can be),
// sequence_invariants_test.go (what must hold) and sequence_ledger_test.go
// (how many Deployment writes the controller may make).
//
// Adding an informer to the controller means adding it here too: a world
// resource (world_server_test.go), its cache with the controller's handler,
// transform and indexes (startController), its requests
// (world_clients_test.go), what the ledger and the invariants expect of it,
// and its RBAC case (test/integration rbac_test.go). The live profiles and
// live pods (world_live_test.go) are the latest such. A new kind of
// referenced input is a row of worldInputs, its world resource, and its
// flag stream in inputsOf.

var (
	sequenceSeed      = flag.Uint64("sequence.seed", 0, "replay the one sequence of this seed and print its event log")
	sequenceCount     = flag.Int("sequence.count", 4000, "how many sequences TestSequences runs (a tenth with -short)")
	sequenceFirst     = flag.Uint64("sequence.first", 1, "seed of the first sequence TestSequences runs")
	sequenceVerbosity = flag.Int("sequence.verbosity", 0, "verbosity of the controller's log lines in a sequence's event log")
	sequenceLive      = flag.Bool("sequence.live", true, "let the half of the sequences that liveOf picks play live delivery (world_live_test.go); false replays every sequence as before it")
)

// settleSteps bounds the settling phase, so that a livelock fails the test.
const settleSteps = 5000

// quietPeriod is how long the world must go without a change on the server
// to be at rest while keys still come back after a delay: long enough for
// every one-shot delay (profile-change delay, backoff) to have passed, so
// only periodic rechecks remain. The longest is a revision kept for a
// Deployment write whose answer was lost and which the cache never shows
// (its Deployment deleted meanwhile): the profile sync looks at it again
// expectationTimeout after the write, with no event.
const quietPeriod = expectationTimeout + time.Minute

func TestSequences(t *testing.T) {
	if *sequenceSeed != 0 {
		w := runSequence(*sequenceSeed)
		if len(w.violations) > 0 {
			t.Fatalf("\n%s", w.report())
		}
		t.Logf("sequence %d holds every invariant\n%s", w.seed, strings.Join(w.log, "\n"))
		return
	}
	count := *sequenceCount
	if testing.Short() {
		count = max(count/10, 1)
	}
	start := time.Now()
	failed, raced, covered := runSequences(*sequenceFirst, count)
	t.Logf("%d sequences (seeds %d to %d) in %v", count, *sequenceFirst, *sequenceFirst+uint64(count)-1, time.Since(start).Round(time.Millisecond))
	var coverage []string
	for _, what := range slices.Sorted(maps.Keys(covered)) {
		coverage = append(coverage, fmt.Sprintf("%s %d", what, covered[what]))
	}
	t.Logf("sequences that exercised: %s", strings.Join(coverage, ", "))
	if len(raced) > 0 {
		// Not a violation by itself: see checkRevisionDeleted.
		t.Logf("%d sequences saw the controller delete a revision that a Deployment its cache did not show mounted (seeds %v)",
			len(raced), raced[:min(len(raced), 20)])
	}

	// One report per invariant, with the shortest sequence that breaks it.
	byInvariant := map[string][]*world{}
	for _, w := range failed {
		seen := map[string]bool{}
		for _, v := range w.violations {
			if !seen[v.invariant] {
				seen[v.invariant] = true
				byInvariant[v.invariant] = append(byInvariant[v.invariant], w)
			}
		}
	}
	invariants := make([]string, 0, len(byInvariant))
	for invariant := range byInvariant {
		invariants = append(invariants, invariant)
	}
	slices.Sort(invariants)
	for _, invariant := range invariants {
		worlds := byInvariant[invariant]
		shortest := slices.MinFunc(worlds, func(a, b *world) int { return len(a.log) - len(b.log) })
		seeds := make([]string, 0, 20)
		for _, w := range worlds[:min(len(worlds), 20)] {
			seeds = append(seeds, fmt.Sprint(w.seed))
		}
		t.Errorf("invariant %s broken by %d of %d sequences (seeds %s); the shortest:\n%s",
			invariant, len(worlds), count, strings.Join(seeds, " "), shortest.reportOf(invariant))
	}
}

// foundByLongRuns are seeds past make test's range that broke an invariant in
// a long run (make test-sequences), on the code before the fix named beside
// them or on a draft of it.
// Each is replayed on every make test: a harness or controller change that
// brings its failure back fails here, not only in the next long run.
var foundByLongRuns = []struct {
	seed uint64
	what string
}{
	{92080932, "harness: a Deployment being deleted (foreground) is no move: the controller lets its place go"},
	{20000011, "revision: a Deployment paused at birth, then stripped of its label, its session's status older than its spec, keeps every revision of the profile in its namespace"},
	{91011707, "revision: the same, its session's status never written"},
	{326611, "harness: a profileRef the cache hands over (pf-y, pf-x, pf-y, all edited before) lets the session move again"},
	{42931, "budget: a session moved through a live read, its Deployment outside the cache, holds its slot"},
	{52997, "budget: a live read that shows the controller's own write keeps the move counted"},
	{29340, "revision: a label-only write is shown by its resourceVersion, not by an older object of the same generation"},
	{33659, "revision: the same, while the profile is deleted"},
	{44085, "revision: a session's status names the revision its out-of-cache Deployment runs"},
	{5765, "status: a session with nothing to mount finds its Deployment outside the cache by a live read"},
	{57524, "status: the same, with the profile volume edited"},
	{58508, "requests: a live read that finds no Deployment ends the writes it was waiting for"},
	{16099, "rollout: a foreign Deployment found by a live read holds nothing"},
	{42998, "rollout: a Deployment found by a live read, not moved by the controller, is no member"},
	{55591, "rollout: a settled rollout hears that a member stopped being Ready"},
	{2555, "revision: a revision a session stopped reporting is looked at again"},
	{1427, "rollout: a template patch whose answer was lost ends when the cache shows a later generation"},
	{81046, "fan-out: a revision found alive after a lost delete answer queues the sessions that waited for it"},
	{61924, "fan-out: the same"},
	{62814, "revision: a session blocked by someone else's Deployment names no revision"},
	{57398, "revision: a write the cache shows releases its revision for another look"},
	{67445, "budget: an answered move the cache shows an older version of holds its slot"},
	{11517, "rollout: a move whose answer was lost does not hold a slot while the cache shows the old version"},
	{39756, "rollout: the same"},
	{90654, "status: a session whose Deployment left the cache looks for it"},
	{479, "revision: a deleted session's Deployment leaving the cache is nothing to its successor"},
	{44256, "revision: a session deleted with orphan propagation before the cache shows its new Deployment keeps its write's revision"},
	{811713, "revision: the same"},
	{454940, "revision: a scaled-down Deployment out of the cache, its status naming no revision, keeps its ReplicaSet's"},
	{4025841, "revision: a create answered 500 that never shows looks at its revision again when it expires"},
	{67517, "budget: a move whose Deployment the cache does not show keeps its place until a live read shows it ended"},
	{13001000, "inputs: a session whose Deployment its user paused gives its place among max-rolling back"},
	{22003783, "ledger: a rotation's moves count in the cluster-wide rate with the profile's"},
	{26044857, "harness: a session whose game servers failed moves to new Secret data during its profile's halt"},
	{26002374, "harness: an orphaned Deployment's move holds no place in the cluster-wide budget"},
	{20002192, "revision: a live read that finds the session's new Deployment orphaned keeps the revision it mounts"},
	{65157, "harness: a sync that finds a budget wait again on a stale copy of its session keeps the move it owes"},
	{12010905, "status: a restarted controller finds a session's Deployment outside the cache by its ReplicaSets"},
	{13003370, "status: the same"},
	{14004257, "status: the same"},
	{5006036, "harness: a revision deleted in the race that the quota refuses to create again is gone, as one a user deleted"},
	{21001849, "harness: at rest only once a revision kept for a lost Deployment write is looked at again, expectationTimeout after it"},
	{26037852, "harness: the same"},
	{92148402, "harness: a spec change whose write would be only a rotation of its Secrets waits for a place among max-rolling, and keeps its move"},
	{92169787, "status: a restarted controller hears of a ReplicaSet of a session's Deployment outside the cache that arrives after the session's sync"},
	{1457, "harness: a rotation's canary whose Deployment its user paused never passes, and holds the others at rest as its ProfileRollout says"},
	{351, "harness: a rotation's canary that failed holds the one place of max-rolling, and the other canary waits for it at rest"},
	{96001036, "rollout: a rotation that waits because another object it reads is gone asks for the plan that names its canaries, not the idle resync"},
	{96000826, "rollout: the same, for a rotation of a paused profile"},
	{7341499, "rollout: the same"},
	{99047274, "budget: one plan admits a session's move to new content and lets a rotation's canary go; the canary's input move leaves the admitted place"},
	{99154501, "budget: the same"},
	{99219757, "rollout: a session whose input move failed, then named another profile, leaves its old profile's places, and that profile's ProfileRollout hears of it"},
	{99152112, "harness: a rotation's canary whose Deployment keeps a timed-out condition naming a ReplicaSet of another revision never ends its move, and holds the one place of max-rolling at rest"},
	{99240276, "harness: the same"},
	{99132069, "budget: a Deployment written through a live read, out of the cache, that the cache then shows by an older version keeps its move's place"},
	{99120355, "revision: a revision kept again after its delete went unanswered is read live, and mountable at once, not when the expectation times out"},
	{99169144, "revision: a session whose status was written for an earlier spec looks for its Deployment outside the cache before it reports none"},
	{99303926, "rollout: a live read of a move outside the cache whose status the Deployment controller wrote since keeps the move's place in the profile's rollout"},
	{99392748, "rollout: the same"},
	{99310449, "harness: a rotation's canary waited at rest for the cluster-wide budget, held by a move that never timed out: the world's Deployment controller now resets the condition on a new ReplicaSet, as the real one does"},
	{99364365, "harness: the world's Deployment controller, like the real one, resets a timed-out condition when it creates the new template's ReplicaSet; a rollout no longer waits for good on a start that never times out"},
	{99395025, "harness: the same"},
	{99414033, "harness: an ungranted namespace keeps the revisions that the scaled-down ReplicaSets of a Deployment outside the cache mount"},
	{99439428, "harness: the same"},
	{99419688, "rollout: a deleted session's move frees its profile's place, and that profile's ProfileRollout hears of it"},
	{99436407, "budget: a rotation's canary is not held back by a move the rollout admitted whose revision cannot be had"},
	{99045289, "harness: a moved session whose Deployment completed and then rolls for its own spec is no move of its profile"},
	{99775510, "profile-budget: a session found rolling at a restart has no place of its own to move again in: its move needs one like any other"},
	{99797636, "harness: a moved session whose Deployment completed and then rolls for its own spec holds no place of the profile's max-rolling over every kind"},
	{99772718, "canary: a reader of an object gone asks for a plan while the latest names that object's canary"},
	{99837506, "cluster-budget: a move granted and then refused a write keeps its place while the Deployment rolls the session's move before"},
	{99842182, "harness: a Deployment being deleted restarts no game server: it holds no place of max-rolling"},
	{99880284, "profile-budget: a failed rotation of a session off the new content holds back no move to it: the canary moves"},
	{99922090, "harness: a session outside the cache whose status predates its spec keeps every revision of its profile, as revisionsOutOfSight says"},
	{100156461, "unpaced: a new session that waited for a plan under the paced policy before a restart hears of the first plan after it"},
	{100196931, "digest key: the record of a new key alone takes no move along ahead of the profile-change delay"},
	{100158128, "digest key: a digest that changed since it was made under the previous key is recorded under no key until it moves"},
	{100152052, "digest key: a digest of an earlier version whose Secret is gone is recorded under no key while keys changed"},
	{100151319, "harness: a key that took a digest over for other data than the template runs: the move that corrects it is the cost of a lost key"},
	{100154944, "harness: a digest of an earlier version through two key changes: no process can tell its key"},
	{100251414, "digest key: a digest of an earlier version whose Secret is gone is recorded under the current key when no key changed"},
	{100383317, "budget per minute: a move whose write a conflict refused starts at its retried write"},
	{100380258, "harness: a revision that cannot be created in the platform's namespace does not hold the sessions of another"},
	{100386726, "harness: a place handed out counts as many places as the limits count a move"},
	{100517479, "budget: a move whose write was answered 500 but applied keeps its place until a live read or the cache tells"},
	{100621731, "budget per minute: a write to the target is a move when a hand edit took the hash annotation away from the revision the volume mounts"},
	{100641623, "harness: syncs that wait for the cache to show what a live read after a write answered 500 found are no proof of order"},
	{100651141, "harness: a session whose profile is missing leaves its Deployment until the revision it runs reaches the cache, and that is no proof of order"},
	{100591783, "harness: a write that changes the template for the session's spec may bring its Secret digest to the current key"},
	{43214, "harness: a write that leaves a rotation waiting for its canary owes the write that takes it, once the plan picks the canary"},
}

// liveFoundByLongRuns are seeds past make test's range whose live sequence
// (liveOf) broke an invariant in a long run, replayed with live delivery.
var liveFoundByLongRuns = []struct {
	seed uint64
	what string
}{
	{5055, "live: a move a restarted controller found under way ends when its live profile no longer holds its content"},
	{12456, "live: a sync waits for the cache to show its own write of the live profile, rather than take the session for new"},
	{17244, "live: the same"},
	{6001, "live: an orphaned live profile is taken over by a new session of its name; another's is reported, not a failed sync"},
	{12571, "live: the same"},
	{11384, "live: a Deployment labelled live whose profile volume a user pointed elsewhere is no live move of a restarted controller"},
	{22059, "live: the same"},
	{22726, "live: the same"},
	{6153, "harness: a live profile write made again with newer content after the same sync's Deployment write failed is owed by the spec write"},
	{22315, "harness: the same"},
	{39593, "budget per minute: a switch of delivery with the same content is a move of its own, not the one under way"},
	{51486, "budget per minute: the same"},
	{79687, "budget per minute: the same"},
	{50962, "moves: the same, for a switch back made while the switch is under way"},
	{74619, "budget per minute: a switch to live records its start on the Deployment too: the user may delete the live profile"},
	{64611, "harness: a live delivery fails at its deadline without an event, and frees its cluster place then"},
	{70932, "harness: the same"},
	{42658, "harness: a write for new inputs takes the profile's current content along, live as in a new template"},
	{32614, "harness: the same"},
	{52234, "harness: the same"},
	{70585, "budget: a paused Deployment's live move keeps its place while its running game servers take the content, and the plan counts it before the caches show it"},
}

func TestSequenceRegressions(t *testing.T) {
	for _, tc := range liveFoundByLongRuns {
		t.Run(fmt.Sprintf("live %d", tc.seed), func(t *testing.T) {
			if !liveOf(tc.seed) {
				t.Fatalf("seed %d does not play live delivery: liveOf changed, and the seed replays another sequence", tc.seed)
			}
			if w := runWorld(newWorldLive(tc.seed, true)); len(w.violations) > 0 {
				t.Fatalf("%s\n%s", tc.what, w.report())
			}
		})
	}
	for _, tc := range foundByLongRuns {
		t.Run(fmt.Sprint(tc.seed), func(t *testing.T) {
			// The sequence as it was found, and match-safe or with the
			// platform's profile if its seed makes it so (then it is
			// another sequence of the same seed).
			if w := runWorld(newWorldOf(tc.seed, false, false)); len(w.violations) > 0 {
				t.Fatalf("%s\n%s", tc.what, w.report())
			}
			// Found before live delivery (world_live_test.go) was in the
			// sequences: replayed without it, as they were found.
			if w := runWorld(newWorldLive(tc.seed, false)); len(w.violations) > 0 {
				t.Fatalf("%s (match-safe)\n%s", tc.what, w.report())
			}
		})
	}
}

// TestSequenceReplayIsDeterministic guards the harness itself: a sequence
// must replay the same way from its seed alone, whether it ran by itself or
// beside others, or a failure could not be debugged.
func TestSequenceReplayIsDeterministic(t *testing.T) {
	const seeds = 20
	beside := make([]*world, seeds+1)
	var wg sync.WaitGroup
	for seed := 1; seed <= seeds; seed++ {
		wg.Go(func() { beside[seed] = runSequence(uint64(seed)) })
	}
	wg.Wait()
	for seed := 1; seed <= seeds; seed++ {
		alone := runSequence(uint64(seed))
		if i := firstDifference(beside[seed].log, alone.log); i >= 0 {
			t.Errorf("sequence %d replays differently from line %d:\n  %s\n  %s", seed, i,
				lineOr(beside[seed].log, i), lineOr(alone.log, i))
		}
	}
}

func firstDifference(a, b []string) int {
	for i := range max(len(a), len(b)) {
		if lineOr(a, i) != lineOr(b, i) {
			return i
		}
	}
	return -1
}

func lineOr(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end of log)"
}

// runSequences runs count sequences from seed first on every CPU and returns
// those that broke an invariant, by seed, and the seeds of those in which
// the controller deleted a revision in the race checkRevisionDeleted logs.
func runSequences(first uint64, count int) (failed []*world, raced []uint64, covered map[string]int) {
	covered = map[string]int{}
	seeds := make(chan uint64)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range goruntime.GOMAXPROCS(0) {
		wg.Go(func() {
			for seed := range seeds {
				w := runSequence(seed)
				mu.Lock()
				if len(w.violations) > 0 {
					failed = append(failed, w)
				}
				if w.races > 0 {
					raced = append(raced, seed)
				}
				for what := range w.covered {
					covered[what]++
				}
				mu.Unlock()
			}
		})
	}
	for i := range uint64(count) {
		seeds <- first + i
	}
	close(seeds)
	wg.Wait()
	slices.SortFunc(failed, func(a, b *world) int { return cmp.Compare(a.seed, b.seed) })
	slices.Sort(raced)
	return failed, raced, covered
}

func runSequence(seed uint64) *world { return runWorld(newWorld(seed)) }

func runWorld(w *world) *world {
	defer w.stopController()
	w.populate()
	w.startController()
	steps := 20 + w.rng.IntN(60)
	if w.matchSafe.on {
		// Busy sessions, windows and the budget hold moves back: it takes
		// longer sequences for them to meet each other.
		steps += 60
	}
	for w.step = 1; w.step <= steps && w.alive; w.step++ {
		w.act()
	}
	if w.alive && w.settleAndCheck() {
		w.rotateAtRest()
	}
	return w
}

// settleAndCheck lets the world come to rest, checks what must hold at
// rest and at the idle resync, and reports whether the sequence goes on:
// it settled and nothing ended it.
func (w *world) settleAndCheck() bool {
	if !w.settle() {
		return false
	}
	w.checkAtRest()
	w.checkIdle()
	return w.alive
}

// world is everything one sequence plays with.
type world struct {
	seed               uint64
	rng                *rand.Rand
	clock              *clocktesting.FakeClock
	start              time.Time
	profileChangeDelay time.Duration
	actions            []action

	server     *apiServer
	kubeClient *k8sfake.Clientset
	gameClient *gamesfake.Clientset

	// The controller now running: its caches, queues and context. queue
	// holds session keys, profileQueue profile keys (the profile sync).
	ctrl         *Controller
	ctx          context.Context
	stop         context.CancelFunc
	caches       [resourceCount]*informerCache
	queue        *stepQueue
	profileQueue *stepQueue

	// Requests: faults armed for them, and what the current sync did.
	faults     []fault
	lastCreate lastCreate
	// controllerTried names the Deployments the controller ever sent a
	// create or patch for, answered or not.
	controllerTried map[string]bool
	// writeUnanswered names the Deployments whose last write the
	// controller sent was answered 500, applied or not: a GET of each may
	// follow, as only the API server knows what became of the write.
	writeUnanswered map[string]bool
	// lastRevisionCreate is the revision whose create last answered
	// AlreadyExists: a GET of it may follow (see getConfigMap).
	lastRevisionCreate string
	syncKey            string
	syncWrote          bool
	// syncWroteStatus is set when the current session sync writes its
	// session's status (see waitsForRollout).
	syncWroteStatus bool
	// syncHeld is set when the current session sync finds its profile's
	// current revision missing from the revision cache (see heldForRevision).
	syncHeld bool
	// awaitsCache maps a Deployment that the controller read live after a
	// write of it was answered 500, and found newer than its cache, to the
	// resourceVersion it read: until the cache shows that, its syncs may
	// rightly wait (cacheBehindLiveRead).
	awaitsCache    map[string]string
	profileSyncKey string
	requestsBy     map[string]int

	// Revisions (see world_revisions_test.go): the names ever created, the
	// last deletion of each name, the last writer of each Deployment, and
	// how many deletions raced a Deployment write.
	everRevision      map[string]bool
	revisionDeletions map[string]revisionDeletion
	lastWriter        map[string]author
	races             int
	// deletedLately holds, by name, the UID of the revision the controller
	// last saw its delete succeed (or find gone) with no create since: it
	// does not mount that revision while its cache still shows that UID. A
	// restarted controller starts without it.
	deletedLately map[string]types.UID

	// Write accounting (see sequence_ledger_test.go).
	credits map[string]int
	moves   map[string]int
	bursts  map[string]*profileBurst
	// nonOwned holds, by Deployment UID, the fields the world set that the
	// controller must keep.
	nonOwned map[types.UID]nonOwnedFields

	// Paced rollouts (see world_rollout_test.go): whether the sequence's
	// profiles carry rollout policies, the content whose pods never become
	// Ready, whether a quota refuses revision creates (and the revisions it
	// refused), and what the rollout invariants remember.
	paced         bool
	broken        map[string]bool
	revisionQuota bool
	quotaRefused  map[string]bool
	profileEpoch  map[string]int
	seenProfile   map[string]string
	refEpoch      map[string]int
	disturbed     map[string]int
	halts         map[string]haltRecord
	moving        map[string]map[string]types.UID
	profileMoving map[string]map[string]restartInProfile
	moveCount     map[moveKey]int
	// covered counts what the sequence exercised, for TestSequences to
	// report: paced moves checked against a budget, halts recorded,
	// progress deadlines exceeded, ...
	covered map[string]int
	// templateHashes remembers the Deployment controller stand-in's
	// pod-template hashes, by Deployment UID and generation.
	templateHashes map[string]string
	// matchSafe is what the match-safe invariants remember
	// (world_matchsafe_test.go).
	matchSafe matchSafeWorld
	// tenancy: the platform's profile and its grants are in the sequence;
	// cacheGranted: whether the controller's grant cache, as last
	// delivered, permits the world's sessions the platform's profile.
	tenancy      bool
	cacheGranted bool
	// platformSessions: the platform runs sessions of its own on its
	// profile, and the cluster-wide budget is shared by two namespaces
	// (world_tenancy_test.go).
	platformSessions bool
	// inputs are the kinds of referenced input the sessions read, whose
	// objects users write, relabel and delete (world_inputs_test.go);
	// inputMoves counts, by session, the changes of its inputs its cache
	// showed that its Deployment has yet to take; inputReaders are the
	// sessions the current call into the controller must queue, for a
	// change of an input they read.
	inputs       []*worldInput
	inputMoves   map[string]int
	inputReaders []inputReader
	// digestKeys are the keys the controller process digests Secrets
	// under; keyChanges, whether the sequence loses and rotates them, and
	// keyRecords the Deployments credited a write of their key record
	// (world_digestkey_test.go).
	digestKeys SecretDigestKeys
	keyChanges bool
	keyRecords map[string]bool
	keysHad    [][]byte
	// canary is what the canaries of rotations showed
	// (world_inputcanary_test.go).
	canary inputCanaryMemory
	// live is what live delivery adds: whether the sequence plays it, the
	// game servers and the live profiles' share of the write ledger
	// (world_live_test.go).
	live liveWorld

	alive      bool // false once the controller panicked
	settling   bool
	failStreak map[string]int
	// lastChange is when the server last changed.
	lastChange time.Time
	step       int
	log        []string
	violations []violation
}

func newWorld(seed uint64) *world { return newWorldLive(seed, *sequenceLive && liveOf(seed)) }

// newWorldLive is newWorld, playing live delivery or not
// (world_live_test.go).
func newWorldLive(seed uint64, live bool) *world {
	tenancy := tenancyOf(seed)
	// The platform's sessions are there to share the cluster-wide budget
	// with the world's: their sequences have one (match-safe).
	return newWorldWith(seed, matchSafeOf(seed) || tenancy && platformSessionsOf(seed), tenancy, live, inputsOf(seed)...)
}

// newWorldOf is newWorld, match-safe or not, with the platform's profile and
// its grants or without (world_tenancy_test.go), with the kinds of
// referenced input given (world_inputs_test.go), without live delivery.
func newWorldOf(seed uint64, matchSafe, tenancy bool, inputs ...*worldInput) *world {
	return newWorldWith(seed, matchSafe, tenancy, false, inputs...)
}

// newWorldWith is newWorldOf, playing live delivery or not.
func newWorldWith(seed uint64, matchSafe, tenancy, live bool, inputs ...*worldInput) *world {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	w := &world{
		seed:       seed,
		rng:        rand.New(rand.NewPCG(seed, 0x5e9_5e55)),
		clock:      clocktesting.NewFakeClock(start),
		start:      start,
		requestsBy: map[string]int{},
		credits:    map[string]int{},
		moves:      map[string]int{},

		everRevision:      map[string]bool{},
		revisionDeletions: map[string]revisionDeletion{},
		lastWriter:        map[string]author{},
		deletedLately:     map[string]types.UID{},
		controllerTried:   map[string]bool{},
		writeUnanswered:   map[string]bool{},
		awaitsCache:       map[string]string{},

		bursts:   map[string]*profileBurst{},
		nonOwned: map[types.UID]nonOwnedFields{},

		broken:        map[string]bool{},
		quotaRefused:  map[string]bool{},
		profileEpoch:  map[string]int{},
		seenProfile:   map[string]string{},
		refEpoch:      map[string]int{},
		disturbed:     map[string]int{},
		halts:         map[string]haltRecord{},
		moving:        map[string]map[string]types.UID{},
		profileMoving: map[string]map[string]restartInProfile{},
		moveCount:     map[moveKey]int{},
		covered:       map[string]int{},

		templateHashes: map[string]string{},

		alive:      true,
		failStreak: map[string]int{},
		tenancy:    tenancy,
		inputs:     inputs,

		platformSessions: tenancy && platformSessionsOf(seed),

		inputMoves: map[string]int{},

		digestKeys: SecretDigestKeys{Current: worldDigestKey},
		keysHad:    [][]byte{worldDigestKey},
		keyRecords: map[string]bool{},
	}
	w.profileChangeDelay = []time.Duration{0, 500 * time.Millisecond, 2 * time.Second}[w.rng.IntN(3)]
	w.paced = w.rng.IntN(3) == 0
	for _, in := range inputs {
		w.keyChanges = w.keyChanges || in.resource == secretsResource && keyChangesOf(seed)
	}
	if w.paced && len(inputs) > 0 && canaryRotationsOf(seed) {
		w.canary.rng = rand.New(rand.NewPCG(seed, 0xca9a+1))
	}
	if w.rng.IntN(2) == 0 {
		w.broken[ProfileHash(&corev1.ConfigMap{Data: pick(w, worldProfileData)})] = true
	}
	w.matchSafe = newMatchSafeWorld(matchSafe, w.rng)
	w.live = newLiveWorld(live, w)
	if w.platformSessions {
		// Both namespaces' sessions share a budget that binds, with room
		// for more than one: what each holds then tells them apart.
		w.matchSafe.maxMoving, w.matchSafe.perMinute = fairShareBudgetOf(seed)
	}
	w.actions = w.stepActions()
	w.server = newAPIServer(w.clock, w.observe)
	// Bare fakes: the reactors answer every request, so the fakes' object
	// trackers (and the cost of building them, thousands of times) are not
	// needed.
	w.kubeClient = &k8sfake.Clientset{}
	w.gameClient = &gamesfake.Clientset{}
	w.installReactors()
	w.logf("sequence %d, profile-change delay %v, paced %t, broken content %v", seed, w.profileChangeDelay, w.paced, slices.Sorted(maps.Keys(w.broken)))
	if matchSafe {
		w.logf("match-safe: %s", describeBudget(w.matchSafe))
	}
	if tenancy {
		w.logf("tenancy: sessions may use %s by grant", worldPlatformRef)
	}
	if w.platformSessions {
		w.logf("fair shares: the platform runs sessions %v of its own on %s", worldPlatformSessionNames, worldPlatformRef)
	}
	for _, in := range inputs {
		w.logf("inputs: sessions read labelled %ss %v", in.kind, in.names)
	}
	if w.live.on {
		w.logf("live delivery: profiles may deliver live; the game servers of %v never acknowledge", slices.Sorted(maps.Keys(w.live.neverAcks)))
	}
	if w.canary.rng != nil {
		w.logf("canary rotations: paced profiles start with a canary, templates read %s %s", inputs[0].kind, inputs[0].names[0])
	}
	return w
}

// observe hears of every write the server makes.
func (w *world) observe(ch change) {
	w.lastChange = w.clock.Now()
	w.noteRolloutChange(ch)
	switch ch.resource {
	case revisionsResource:
		w.noteRevisionChange(ch)
	case deploymentsResource:
		w.lastWriter[nameOf(ch)] = ch.author
	case liveProfilesResource, podsResource:
		w.noteLiveChange(ch)
	}
	c := w.caches[ch.resource]
	if c == nil {
		return // no controller yet: its caches will start from the server
	}
	if c.seen(ch) {
		c.observe(ch)
	} else {
		w.noteUnseen(ch)
	}
}

// startController starts a controller, or replaces the running one as a
// restart would: the new one's caches start from the server's current state,
// and what the old one had queued or not yet received is gone.
func (w *world) startController() {
	if w.ctrl == nil {
		for _, s := range w.server.sessions() {
			w.credit(s.Name) // a first controller has everything to create
		}
	} else {
		w.creditRestart()
		w.stopController()
		clear(w.deletedLately)
	}
	logger := funcr.New(func(prefix, args string) { w.logf("    log %s%s", prefix, args) },
		funcr.Options{Verbosity: *sequenceVerbosity})
	w.ctx, w.stop = context.WithCancel(klog.NewContext(context.Background(), logger))

	// The informers never run, so the label filters are the caches'
	// (informerCache.matches).
	informers := testInformers(w.kubeClient, w.gameClient)
	informers.Grants = grantInformer()
	informers.SecretDigestKeys = w.digestKeys
	c, err := NewController(w.ctx, w.kubeClient, w.gameClient, informers, Options{
		ProfileSelector:    "games.example.com/profile=true",
		ProfileChangeDelay: w.profileChangeDelay,
		Clock:              w.clock,
		// The default rollout policy: every session moves at once.
		RevisionHistoryLimit: worldRevisionHistoryLimit,
		MaxMovingSessions:    w.matchSafe.maxMoving,
		MaxMovesPerMinute:    w.matchSafe.perMinute,
	})
	if err != nil {
		panic(fmt.Sprintf("NewController: %v", err))
	}
	c.sessions.queue.ShutDown() // stops the goroutines of the queues it made
	c.profiles.queue.ShutDown()
	w.queue = newStepQueue(w.clock, w.rng.IntN)
	w.queue.onGet = func(key string) {
		w.syncKey = key
		w.syncHeld = w.heldForRevision(key)
		w.logf("sync %s", key)
	}
	c.sessions.queue, c.sessions.lanes = w.queue, w.queue
	w.profileQueue = newStepQueue(w.clock, w.rng.IntN)
	w.profileQueue.onGet = func(key string) {
		w.profileSyncKey = key
		w.logf("sync profile %s", key)
	}
	c.profiles.queue = w.profileQueue
	c.setRecorder(&worldRecorder{w: w})
	w.ctrl = c

	// The same handlers NewController registers on the informers.
	h := c.eventHandlers()
	w.caches = [resourceCount]*informerCache{
		sessionsResource:    newInformerCache(sessionsResource, informers.Sessions.Informer().GetIndexer(), h.sessions),
		profilesResource:    newInformerCache(profilesResource, informers.Profiles.Informer().GetIndexer(), h.profiles),
		deploymentsResource: newInformerCache(deploymentsResource, informers.Deployments.Informer().GetIndexer(), h.deployments),
		revisionsResource:   newInformerCache(revisionsResource, informers.Revisions.Informer().GetIndexer(), h.revisions),
		rolloutsResource:    newInformerCache(rolloutsResource, informers.Rollouts.Informer().GetIndexer(), h.rollouts),
		replicaSetsResource: newInformerCache(replicaSetsResource, informers.ReplicaSets.Informer().GetIndexer(), h.replicaSets),
		grantsResource:      newInformerCache(grantsResource, informers.Grants.GetIndexer(), h.grants),
		liveProfilesResource: newInformerCache(liveProfilesResource, informers.LiveProfiles.Informer().GetIndexer(),
			h.liveProfiles),
		podsResource: newInformerCache(podsResource, informers.LivePods.Informer().GetIndexer(), h.livePods),
	}
	if _, ok := w.caches[podsResource].indexer.GetIndexers()[sessionOfPodIndex]; !ok {
		panic("harness: the world's pod cache is not the one the controller registered its index on")
	}
	for i, in := range worldInputs {
		names, hash := c.caches.inputs[i].annotations()
		if c.caches.inputs[i].kind() != in.kind || names != in.namesAnnotation || hash != in.hashAnnotation {
			panic(fmt.Sprintf("harness: the controller's input %d is %s (%s, %s), the world's %s", i, c.caches.inputs[i].kind(), names, hash, in.kind))
		}
		w.caches[in.resource] = newInformerCache(in.resource, c.caches.inputs[i].cache, h.inputs[i])
		if in.resource == secretsResource {
			w.caches[in.resource].transform = w.digestKeys.Digester()
		}
	}
	for r, ic := range w.caches {
		ic.onDeliver = func(ev watchEvent, prev object) {
			if ev.change.author == byRelist {
				w.logf("  relisted %s", ev)
			}
			w.noteDelivered(apiResource(r), ev, prev)
		}
		ic.fill(w.server.list(apiResource(r)))
	}
	for _, name := range w.profileNames() {
		w.noteProfileSeen(name, w.caches[profilesResource].profile(name))
	}
	w.cacheGranted = w.grantedInCache()
	// As Run does once the caches have synced: the moves of the last
	// minute are rebuilt from what the caches show.
	w.forgetUnseenMoves()
	c.sessions.seedLedger()
	w.call(func() {
		for _, ic := range w.caches {
			ic.announce()
		}
	})
}

// call runs fn, one controller entry point, and then queues what it added to
// either queue, in sorted order (see stepQueue.call). It returns the keys fn
// rate-limited in each queue, that is, the syncs that failed.
func (w *world) call(fn func()) (sessions, profiles []string) {
	w.noteCanaryView()
	before := viewLedger(w.ctrl.sessions.moves)
	sessions = w.queue.call(func() { profiles = w.profileQueue.call(fn) })
	w.checkInputReadersQueued()
	if wrong := w.ctrl.sessions.moves.books(); wrong != "" {
		// The ledger's own counts: what its limits and fair queue go by.
		w.violate("ledger-books", "%s", wrong)
	}
	w.checkFairShare(before, viewLedger(w.ctrl.sessions.moves))
	return sessions, profiles
}

// cachesLag reports whether a cache has events yet to receive.
func (w *world) cachesLag() bool {
	return slices.ContainsFunc(w.caches[:], func(c *informerCache) bool { return len(c.pending) > 0 })
}

func (w *world) stopController() {
	if w.stop != nil {
		w.stop()
	}
}

// sync runs one processNextWorkItem and reports false if the controller
// panicked, which ends the sequence.
func (w *world) sync() bool {
	w.lastCreate = lastCreate{}
	w.syncKey, w.syncWrote, w.syncWroteStatus, w.syncHeld = "", false, false, false
	w.live.syncMoved = ""
	panicked := false
	rateLimited, _ := w.call(func() {
		defer func() {
			if r := recover(); r != nil {
				panicked = true
				w.violate("panic", "the controller panicked: %v\n%s", r, debug.Stack())
			}
		}()
		w.ctrl.sessions.worker().processNext(w.ctx)
	})
	if panicked {
		w.alive = false
		return false
	}
	key := w.syncKey
	name := worldNameOfKey(key)
	if slices.Contains(rateLimited, key) {
		// Failures count once the world is quiet and the caches have
		// received everything: before that, a sync may fail for want of
		// news (a status update of a session deleted meanwhile).
		if w.settling && !w.cachesLag() {
			if w.failStreak[key]++; w.failStreak[key] == 3 {
				w.violate("stuck", "GameSession %s failed 3 syncs in a row in a quiet world, with every cache up to date", name)
			}
		}
		return true
	}
	w.failStreak[key] = 0
	// A sync that left its status write to the status lane has not found
	// the session in order: the status lane's sync of it goes on.
	deferred := w.queue.takeDeferred(key)
	if !w.syncWrote && !w.syncHeld && !w.cacheBehindLiveRead(name) && !deferred && !w.waitsForRollout(name) {
		w.lapseCredits(name)
	}
	return true
}

// syncProfile runs one processNextProfile and reports false if the
// controller panicked, which ends the sequence.
func (w *world) syncProfile() bool {
	w.profileSyncKey = ""
	panicked := false
	_, rateLimited := w.call(func() {
		defer func() {
			if r := recover(); r != nil {
				panicked = true
				w.violate("panic", "the controller panicked: %v\n%s", r, debug.Stack())
			}
		}()
		w.ctrl.profiles.worker().processNext(w.ctx)
	})
	if panicked {
		w.alive = false
		return false
	}
	key := w.profileSyncKey
	streak := "profile " + key
	if slices.Contains(rateLimited, key) {
		// A quota refusing its revision fails the profile's syncs, rightly.
		if w.settling && !w.cachesLag() && !w.revisionQuota {
			if w.failStreak[streak]++; w.failStreak[streak] == 3 {
				w.violate("stuck", "profile %s failed 3 syncs in a row in a quiet world, with every cache up to date", key)
			}
		}
		return true
	}
	w.failStreak[streak] = 0
	return true
}

// settle lets the world come to rest: no user acts and no fault is injected
// any more; the caches receive everything, the GC and kcm finish, delayed keys
// of both queues are released, and the queues run until they are empty, or
// hold only keys that look again now and then and find nothing to do (a
// session blocked by a foreign Deployment rechecks periodically: that is rest
// too).
func (w *world) settle() bool {
	w.settling = true
	w.faults = nil
	if w.revisionQuota && w.rng.IntN(2) == 0 {
		w.toggleRevisionQuota() // else the quota stays: its rollouts must say so
	}
	clear(w.failStreak)
	w.step = 0
	w.logf("settle")
	// A write whose answer was lost changed nothing the world saw, but
	// needs a fault, so it came before this: quiet counts from here at the
	// earliest.
	quietSince := w.clock.Now()
	for w.step = 1; w.step <= settleSteps; w.step++ {
		var choices []func() bool
		for _, c := range w.caches {
			if len(c.pending) > 0 {
				choices = append(choices, func() bool { w.deliver(c); return true })
			}
		}
		if items := w.gcWork(); len(items) > 0 {
			choices = append(choices, func() bool { w.doWork(items); return true })
		}
		if items := w.kcmWork(); len(items) > 0 {
			choices = append(choices, func() bool { w.doWork(items); return true })
		}
		if w.live.on {
			if items := w.gameServerWork(); len(items) > 0 {
				choices = append(choices, func() bool { w.doWork(items); return true })
			}
		}
		if w.queue.hasReady() {
			choices = append(choices, w.sync)
		}
		if w.profileQueue.hasReady() {
			choices = append(choices, w.syncProfile)
		}
		if len(choices) > 0 {
			if !choices[w.rng.IntN(len(choices))]() {
				return false
			}
			continue
		}
		// Only delayed keys are left. Once nothing has changed on the server
		// for a while, the keys still coming back are periodic rechecks.
		// A progress deadline to pass counts as a delayed key: the
		// Deployment controller acts once it has.
		// So does a maintenance window opening or closing, or max-defer
		// passing, soon: the controller plans again then, with no event.
		waiting := w.waitingKeys()
		deadline, progressing := w.kcmNextDeadline()
		scheduled, changes := w.nextScheduledChange()
		// So does the deadline of a live delivery no game server meets,
		// however long: the controller says so only once it passed.
		if live, ok := w.liveNextDeadline(); ok && (!changes || live.Before(scheduled)) {
			scheduled, changes = live, true
		}
		if w.lastChange.After(quietSince) {
			quietSince = w.lastChange
		}
		if (len(waiting) == 0 && !progressing && !changes) || (w.clock.Since(quietSince) >= quietPeriod && !changes) {
			w.logf("at rest; looking again now and then: %v", waiting)
			return true
		}
		next, ok := w.nextWaiting()
		if progressing && (!ok || deadline.Before(next)) {
			next, ok = deadline, true
		}
		if changes && (!ok || scheduled.Before(next)) {
			next = scheduled
		}
		w.advance(max(next.Sub(w.clock.Now()), time.Millisecond))
	}
	w.violate("stuck", "the world did not come to rest within %d steps; delayed keys %v", settleSteps, w.waitingKeys())
	return false
}

// waitingKeys returns the delayed keys of both queues, profile keys marked.
func (w *world) waitingKeys() []string {
	keys := w.queue.waitingKeys()
	for _, key := range w.profileQueue.waitingKeys() {
		keys = append(keys, "profile "+key)
	}
	return keys
}

// nextWaiting returns when the next delayed key of either queue is ready.
func (w *world) nextWaiting() (time.Time, bool) {
	next, ok := w.queue.nextWaiting()
	if p, pok := w.profileQueue.nextWaiting(); pok && (!ok || p.Before(next)) {
		next, ok = p, true
	}
	return next, ok
}

func (w *world) logf(format string, args ...any) {
	elapsed := w.clock.Since(w.start)
	w.log = append(w.log, fmt.Sprintf("%3d %7.3fs  %s", w.step, elapsed.Seconds(), fmt.Sprintf(format, args...)))
}

// report describes every violation of the sequence, then its event log.
func (w *world) report() string { return w.reportOf("") }

// reportOf is report with the violations of invariant first.
func (w *world) reportOf(invariant string) string {
	var b strings.Builder
	vs := slices.Clone(w.violations)
	slices.SortStableFunc(vs, func(a, b violation) int {
		switch {
		case a.invariant == invariant && b.invariant != invariant:
			return -1
		case b.invariant == invariant && a.invariant != invariant:
			return 1
		}
		return 0
	})
	for _, v := range vs[:min(len(vs), 8)] {
		fmt.Fprintf(&b, "sequence %d, step %d: %s: %s\n", w.seed, v.step, v.invariant, v.message)
	}
	if len(vs) > 8 {
		fmt.Fprintf(&b, "... and %d more violations\n", len(vs)-8)
	}
	fmt.Fprintf(&b, "replay: go test ./pkg/controller -run TestSequence -sequence.seed=%d\nevent log:\n", w.seed)
	b.WriteString(strings.Join(w.log, "\n"))
	return b.String()
}

// worldRecorder writes the controller's Events into the event log.
type worldRecorder struct{ w *world }

func (r *worldRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	name := "?"
	if m, err := meta.Accessor(obj); err == nil {
		name = m.GetName()
	}
	r.w.logf("  event %s %s on %s: %s", eventtype, reason, name, message)
}

func (r *worldRecorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.Event(obj, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r *worldRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.Event(obj, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}
