package controller

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	clocktesting "k8s.io/utils/clock/testing"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

func TestRevisionNameIsAlwaysAValidName(t *testing.T) {
	hash := ProfileHash(newProfile(testNamespace, "classic", classicData))
	for _, profile := range []string{
		"classic",
		strings.Repeat("a", 253),
		strings.Repeat("a", 231) + "-b.c",  // cut right after a dash or a dot
		strings.Repeat("a", 231) + ".-bcd", // the cut leaves "." then "-"
		strings.Repeat("ab.", 84),
	} {
		name := RevisionName(profile, hash)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("RevisionName(%q…) = %q: %v", profile[:min(len(profile), 20)], name, errs)
		}
		if !strings.HasSuffix(name, "-"+hash) {
			t.Errorf("RevisionName(%q…) = %q does not end in the hash", profile[:min(len(profile), 20)], name)
		}
	}
	if got, want := RevisionName("classic", hash), "classic-"+hash; got != want {
		t.Errorf("RevisionName = %q, want %q", got, want)
	}
}

// isRevisionName answers as a comparison with RevisionName would: for the
// names of the profile's own revisions, of its other contents, of other
// profiles, shortened or not, and for names that differ by one character.
func TestIsRevisionNameIsRevisionNameCompared(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	hashes := []string{ProfileHash(newProfile(testNamespace, "classic", classicData)), "0123abcd", "", "ab"}
	profiles := []string{"classic", "arena/classic", "classic.x", strings.Repeat("a", 253),
		strings.Repeat("a", 231) + "-b.c", strings.Repeat("a", 231) + ".-bcd", strings.Repeat("ab/", 84)}
	matches := 0
	for range 5000 {
		profile, hash := profiles[rng.IntN(len(profiles))], hashes[rng.IntN(len(hashes))]
		name := RevisionName(profile, hash)
		if rng.IntN(2) == 0 {
			name = RevisionName(profiles[rng.IntN(len(profiles))], hashes[rng.IntN(len(hashes))])
		}
		switch rng.IntN(4) {
		case 0: // one character changed
			b := []byte(name)
			b[rng.IntN(len(b))] = "-.a0/"[rng.IntN(5)]
			name = string(b)
		case 1: // cut short
			name = name[:rng.IntN(len(name)+1)]
		}
		want := name == RevisionName(profile, hash)
		if got := isRevisionName(name, profile, hash); got != want {
			t.Fatalf("isRevisionName(%q, %q, %q) = %v, want %v", name, profile, hash, got, want)
		}
		if want {
			matches++
		}
	}
	if matches < 1000 {
		t.Fatalf("only %d of the names compared were revision names", matches)
	}
}

func TestNewRevisionIsAnImmutableCopy(t *testing.T) {
	profile := newProfile(testNamespace, "classic", classicData)
	profile.BinaryData = map[string][]byte{"map.bin": {0, 1, 2}}
	hash := ProfileHash(profile)
	r := newRevision(profile, hash, profile.Namespace)
	if r.Immutable == nil || !*r.Immutable {
		t.Error("revision is not immutable")
	}
	if ProfileHash(r) != hash {
		t.Errorf("revision content hashes to %s, the profile's to %s", ProfileHash(r), hash)
	}
	if !isRevision(r) {
		t.Errorf("isRevision(newRevision) = false: %+v", r.ObjectMeta)
	}
	// A revision never carries the profile label, so no profile selector
	// built on it takes a revision for a profile.
	for key := range profile.Labels {
		if _, ok := r.Labels[key]; ok {
			t.Errorf("revision carries the profile's label %q", key)
		}
	}
	squatter := r.DeepCopy()
	squatter.Name = "classic-0000"
	if isRevision(squatter) {
		t.Error("a labelled ConfigMap not named as the revision it claims counts as one")
	}
}

func TestStaleRevisions(t *testing.T) {
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var revisions []*corev1.ConfigMap
	for i := range 6 { // r0 oldest … r5 newest
		revisions = append(revisions, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name:              fmt.Sprintf("r%d", i),
			CreationTimestamp: metav1.NewTime(base.Add(time.Duration(i) * time.Minute)),
		}})
	}
	names := func(cms []*corev1.ConfigMap) []string {
		var out []string
		for _, cm := range cms {
			out = append(out, cm.Name)
		}
		slices.Sort(out)
		return out
	}
	inUse := func(used ...string) func(*corev1.ConfigMap) bool {
		return func(r *corev1.ConfigMap) bool { return slices.Contains(used, r.Name) }
	}
	for _, tc := range []struct {
		name    string
		current string
		used    []string
		keep    int
		want    []string
	}{
		{name: "keep 2, current newest", current: "r5", keep: 2, want: []string{"r0", "r1", "r2"}},
		{name: "in use survive and do not count", current: "r5", used: []string{"r0", "r3"}, keep: 2, want: []string{"r1"}},
		{name: "an old current survives (edited back)", current: "r1", keep: 2, want: []string{"r0", "r2", "r3"}},
		{name: "profile gone", current: "", used: []string{"r5"}, keep: 1, want: []string{"r0", "r1", "r2", "r3"}},
		{name: "keep 0", current: "r5", used: []string{"r4"}, keep: 0, want: []string{"r0", "r1", "r2", "r3"}},
		{name: "keep more than there are", current: "r5", keep: 10, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shuffled := slices.Clone(revisions)
			slices.Reverse(shuffled)
			got := names(staleRevisions(shuffled, []string{tc.current}, inUse(tc.used...), tc.keep))
			if !slices.Equal(got, tc.want) {
				t.Errorf("stale: got %v, want %v", got, tc.want)
			}
		})
	}
}

// A Deployment write holds the revision it mounts until the cache shows it,
// the API server refuses it, or it expires; whatever ends it hands back the
// revisions nothing holds any more, for their profiles to look again. A
// deleted session's writes outlive it: its Deployment may run on.
func TestRevisionExpectationsHoldUntilShownRefusedOrExpired(t *testing.T) {
	clk := clocktesting.NewFakeClock(lastTransition.Time)
	e := newRevisionExpectations(clk)
	session := newSession(testNamespace, "arena-1", "classic")
	key := sessionKey(session)
	hash := ProfileHash(newProfile(testNamespace, "classic", classicData))
	desired := apiServerDeployment(session, hash)
	revision := testNamespace + "/" + RevisionName("classic", hash)
	held := func() bool {
		_, pending := e.mountPending(testNamespace, RevisionName("classic", hash))
		return pending
	}

	// Refused: nothing to wait for.
	write := e.mounting(key, "", 1, false, desired)
	if released := e.wrote(key, write, nil, apierrors.NewAlreadyExists(deploymentsGroupResource, "arena-1")); !slices.Equal(released, []string{revision}) || held() {
		t.Errorf("a refused create released %v and holds %t, want %s released", released, held(), revision)
	}

	// Answered, then the session is deleted: the write holds on, also
	// through a live read of a successor of that name, until the cache
	// shows the Deployment.
	write = e.mounting(key, "", 1, false, desired)
	if released := e.wrote(key, write, desired, nil); released != nil || !held() {
		t.Fatalf("an answered create released %v and holds %t", released, held())
	}
	e.forgetSession(key)
	e.liveRead(key, nil, false, func() string { return "" })
	if _, _, _, ok := e.lastMount(key); ok || !held() {
		t.Errorf("after the session's deletion: its successor sees its write %t, revision held %t; want false, true", ok, held())
	}
	if released := e.deploymentObserved(desired); !slices.Equal(released, []string{revision}) || held() {
		t.Errorf("the cache showing the Deployment released %v and holds %t, want %s released", released, held(), revision)
	}

	// A lost answer: held until expectationTimeout, which mountPending
	// names, then not.
	write = e.mounting(key, "", 1, false, desired)
	e.wrote(key, write, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out")))
	clk.Step(time.Minute)
	if until, pending := e.mountPending(testNamespace, RevisionName("classic", hash)); !pending || !until.Equal(lastTransition.Add(expectationTimeout)) {
		t.Errorf("a create whose answer was lost: held %t until %v, want held until %v", pending, until, lastTransition.Add(expectationTimeout))
	}
	clk.Step(expectationTimeout - time.Minute)
	if held() {
		t.Error("a create whose answer was lost holds its revision past expectationTimeout")
	}
}

// A live read of the session's Deployment outside the cache that shows the
// controller's answered write, its status written by the Deployment
// controller since (a newer resourceVersion, the same generation), shows
// the move: it keeps its place in the profile's rollout (lastMount), as the
// version the write produced does (seed 99303926). A newer spec does not.
func TestRevisionExpectationsLiveReadOfTheWriteWithANewerStatus(t *testing.T) {
	e := newRevisionExpectations(clocktesting.NewFakeClock(lastTransition.Time))
	session := newSession(testNamespace, "arena-1", "classic")
	key := sessionKey(session)
	hash := ProfileHash(newProfile(testNamespace, "classic", classicData))
	notCached := func() string { return "" }

	written := apiServerDeployment(session, hash)
	written.UID, written.Generation, written.ResourceVersion = "d-1", 3, "53"
	write := e.mounting(key, written.UID, 2, true, written)
	e.wrote(key, write, written, nil)
	statusSince := written.DeepCopy()
	statusSince.ResourceVersion = "56"
	statusSince.Status.ObservedGeneration = 3
	e.liveRead(key, statusSince, true, notCached)
	if _, got, answered, ok := e.lastMount(key); !ok || !answered || got != hash {
		t.Errorf("a live read of the write with a newer status: lastMount %q answered %t ok %t, want the write's %q", got, answered, ok, hash)
	}

	specSince := statusSince.DeepCopy()
	specSince.ResourceVersion, specSince.Generation = "60", 4
	e.liveRead(key, specSince, true, notCached)
	if _, _, _, ok := e.lastMount(key); ok {
		t.Error("a live read of a newer spec than the write's is taken for the write")
	}
}

// A live read that finds the session's Deployment orphaned (the garbage
// collector removed its owner reference, the session's deletion not yet in
// the cache) finds what that Deployment's pods mount: it carries the
// managed-by label, so the revision index protects its revision once the
// cache shows it, and until then the live read holds it. Someone else's
// Deployment, which the cache never shows, holds nothing.
func TestRevisionExpectationsLiveReadOfAnOrphanedDeploymentHolds(t *testing.T) {
	clk := clocktesting.NewFakeClock(lastTransition.Time)
	e := newRevisionExpectations(clk)
	session := newSession(testNamespace, "arena-1", "classic")
	key := sessionKey(session)
	hash := ProfileHash(newProfile(testNamespace, "classic", classicData))
	revision := testNamespace + "/" + RevisionName("classic", hash)
	held := func() bool {
		_, pending := e.mountPending(testNamespace, RevisionName("classic", hash))
		return pending
	}
	notCached := func() string { return "" }

	created := apiServerDeployment(session, hash)
	write := e.mounting(key, "", 1, false, created)
	e.wrote(key, write, created, nil)
	orphaned := created.DeepCopy()
	orphaned.OwnerReferences = nil
	orphaned.ResourceVersion = bumpVersion(created.ResourceVersion)
	e.liveRead(key, orphaned, false, notCached)
	if !held() {
		t.Fatalf("a live read of the orphaned Deployment lets go of %s, which its pods mount", revision)
	}
	// Deleted with orphan propagation, the session leaves the hold to its
	// Deployment, until the cache shows it.
	e.forgetSession(key)
	if !held() {
		t.Fatalf("the session's deletion lets go of %s, which its orphaned Deployment mounts", revision)
	}
	if released := e.deploymentObserved(orphaned); !slices.Equal(released, []string{revision}) || held() {
		t.Errorf("the cache showing the orphaned Deployment released %v and holds %t, want %s released", released, held(), revision)
	}

	// A successor's create finds a Deployment of that name without the
	// label: the cache never shows it, and it ends the create's hold.
	write = e.mounting(key, "", 1, false, created)
	e.wrote(key, write, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out")))
	foreign := orphaned.DeepCopy()
	foreign.Labels = map[string]string{"app": "someone-else"}
	if released := e.liveRead(key, foreign, false, notCached); !slices.Equal(released, []string{revision}) || held() {
		t.Errorf("a live read of someone else's Deployment released %v and holds %t, want %s released", released, held(), revision)
	}
}

// The garbage collector orphans a session's new Deployment (the session is
// deleted with orphan propagation) before the cache shows it, and the
// session, its deletion not in the cache yet, syncs again: its create finds
// the Deployment by a live read, no longer its own. That Deployment's pods
// mount the revision the create gave it, so the profile, moved on, keeps it
// until the cache shows the Deployment (seed 20002192).
func TestSyncLiveReadOfAnOrphanedDeploymentKeepsItsRevision(t *testing.T) {
	ctx, f, session, profile, _ := orphanedBeforeCached(t)
	f.expectKube(createDeployment(testNamespace, "arena-1"), getDeployment(testNamespace, "arena-1"))
	f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
	f.run(ctx, sessionKey(session))
	f.expectEvents("Warning " + gamesv1.ReasonDeploymentNotControlled)

	// The profile moves on: its first revision is neither current nor kept
	// for history, and only the orphaned Deployment mounts it.
	f.setCached(withData(profile, map[string]string{"game.cfg": "new"}))
	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic") // no delete
	f.events()

	// The session's deletion reaches the cache: the Deployment keeps the
	// revision all the same.
	f.deleteCached(session)
	f.run(ctx, sessionKey(session))    // no request
	f.runProfile(ctx, "arena/classic") // no delete
}
