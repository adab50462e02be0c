package controller

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// Paced rollouts in the world. A third of the sequences are paced: their profiles
// carry rollout policy annotations (canary, max-rolling, max-failed, paused,
// and now and then a value that does not parse), chosen when a profile is
// created and edited mid-sequence, mid-rollout included. Some content is
// "broken" (world.broken): pods of a template that mounts its revision never
// become Ready, and the Deployment controller stand-in reports
// ProgressDeadlineExceeded. A ConfigMap quota can refuse revision creates
// for a while, and faults answer single creates and deletes Forbidden or
// Invalid.
//
// What must hold, checked as the controller writes:
//   - budget: the sessions the controller moved onto a content (from another
//     revision of the profile) that are not Ready on the server, nor being
//     deleted (their game servers go, they do not restart), never exceed
//     max-rolling (resolved as generously as the server's and the cache's
//     policy and session counts allow): a move into a full budget is a
//     violation, a budget that shrank under sessions already moving is not;
//   - profile-budget: the same max-rolling holds over every kind of move
//     together: the sessions of a paced profile the controller restarted,
//     for new content or for new data of their Secrets and ConfigMaps, and
//     whose Deployments still roll that move (neither Ready nor failed on
//     the server), never exceed it;
//   - no session's Deployment moves onto one content twice, unless
//     something in between (a profile edit, a profileRef change, someone
//     else's edit of its profile volume, a new Deployment) set it back;
//   - no move while the controller's cache shows the policy paused;
//   - a halt recorded in a ProfileRollout's status.haltedHash holds while
//     the profile has that content: it is never cleared, and no session
//     moves onto that content (a new one starts on the stable revision);
//   - no revision is deleted while a ReplicaSet the controller's cache shows
//     has pods, or wants some, that mount it (world_revisions_test.go);
//
// and at rest (checkRolloutsAtRest, checkHeldAtRest):
//   - each labelled profile has its ProfileRollout, targeting its current
//     content, with counts that equal what the server shows;
//   - each rollout is Complete, Halted, Paused, Stalled naming the blocked
//     sessions, or its revision unavailable: never silently in progress;
//   - a session not on its profile's current content says why, and the
//     reason agrees with the ProfileRollout: never a silent WaitingForTurn.

var (
	worldPolicyValues = []struct {
		key    string
		values []string
	}{
		{rollout.AnnotationCanary, []string{"", "", "1", "50%"}},
		{rollout.AnnotationMaxRolling, []string{"", "1", "1", "2", "34%"}},
		{rollout.AnnotationMaxFailed, []string{"", "", "0", "1"}},
		{rollout.AnnotationPaused, []string{"", "", "", "true", "false"}},
		{rollout.AnnotationProgressDeadline, []string{"", "", "30s", "2m"}},
	}
	worldInvalidPolicy = [][2]string{
		{rollout.AnnotationMaxRolling, "0"}, {rollout.AnnotationCanary, "-1"},
		{rollout.AnnotationPaused, "yes"}, {rollout.AnnotationMaxFailed, "1.5"},
		{rollout.AnnotationProgressDeadline, "90"},
	}
)

// randomPolicy returns the annotations of a paced profile.
func (w *world) randomPolicy() map[string]string {
	a := map[string]string{}
	for _, p := range worldPolicyValues {
		if v := pick(w, p.values); v != "" {
			a[p.key] = v
		}
	}
	if w.rng.IntN(10) == 0 {
		bad := pick(w, worldInvalidPolicy)
		a[bad[0]] = bad[1]
	}
	w.addMatchSafePolicy(a)
	w.withCanary(a)
	return a
}

func describePolicy(a map[string]string) string {
	var parts []string
	for _, p := range worldPolicyValues {
		if v, ok := a[p.key]; ok {
			parts = append(parts, strings.TrimPrefix(p.key, "rollout.games.example.com/")+"="+v)
		}
	}
	for _, key := range []string{rollout.AnnotationMaxDefer, rollout.AnnotationWindow, rollout.AnnotationDelivery, rollout.AnnotationLiveDefersBusy} {
		if v, ok := a[key]; ok {
			parts = append(parts, strings.TrimPrefix(key, "rollout.games.example.com/")+"="+v)
		}
	}
	if len(parts) == 0 {
		return "unpaced"
	}
	return strings.Join(parts, ",")
}

func worldPolicy(profile *corev1.ConfigMap) rollout.Policy {
	p, _ := rollout.PolicyFor(profile.Annotations, rollout.DefaultPolicy())
	return p
}

// ---- Users ----

// pacedProfile returns a profile of a paced sequence to edit the policy of,
// its annotations ready to be set, or nil.
func (w *world) pacedProfile() *corev1.ConfigMap {
	if !w.paced {
		return nil
	}
	p := w.someProfile()
	if p != nil && p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	return p
}

// editProfilePolicy changes one rollout annotation of a profile: set,
// changed, removed, or made invalid.
func (w *world) editProfilePolicy() bool {
	p := w.pacedProfile()
	if p == nil {
		return false
	}
	if w.rng.IntN(8) == 0 {
		bad := pick(w, worldInvalidPolicy)
		p.Annotations[bad[0]] = bad[1]
	} else {
		a := pick(w, worldPolicyValues)
		setOrDelete(p.Annotations, a.key, pick(w, a.values))
	}
	w.updatePolicy(p)
	return true
}

// setOrDelete sets m[key] to value, or deletes it for "".
func setOrDelete(m map[string]string, key, value string) {
	if value == "" {
		delete(m, key)
		return
	}
	m[key] = value
}

// updatePolicy writes a profile whose rollout annotations a user changed.
func (w *world) updatePolicy(p *corev1.ConfigMap) {
	updated, err := w.server.update(byUser, profilesResource, p, true)
	must(err)
	w.logf("user: configmap %s rollout policy %s (rv %s)", p.Name, describePolicy(p.Annotations), updated.GetResourceVersion())
}

// toggleRevisionQuota makes the ConfigMap quota refuse, or accept again,
// every revision create.
func (w *world) toggleRevisionQuota() bool {
	w.revisionQuota = !w.revisionQuota
	w.logf("quota: revision creates are refused: %t", w.revisionQuota)
	return true
}

// failover replaces the controller while a rollout is in progress, as a new
// leader would: what the old one had in memory is gone, and the new one
// starts from the server (its caches, and the ProfileRollouts).
func (w *world) failover() bool {
	for _, obj := range w.server.list(rolloutsResource) {
		if obj.(*gamesv1.ProfileRollout).Status.Phase != gamesv1.RolloutPhaseComplete {
			w.logf("failover mid-rollout of profile %s: a new leader starts", obj.GetName())
			w.startController()
			return true
		}
	}
	return false
}

// ---- What the world remembers ----

// haltRecord is a halt the controller recorded: on content hash, while
// the profile was in epoch.
type haltRecord struct {
	hash  string
	epoch int
}

// moveKey names one move of a Deployment onto one content: the same key
// twice is a session moving twice for one content.
type moveKey struct {
	name, profile, hash string
	uid                 types.UID
	// What sets a session back, and so lets it move again.
	epoch, refEpoch, disturbed int
	// How the content is delivered, and how many times the profile's
	// delivery switched: a switch moves a session onto its content again.
	live     bool
	delivery int
}

// noteRolloutChange is told of every server change: it keeps the epochs of
// profileRef changes and of others' edits of a Deployment's profile volume.
func (w *world) noteRolloutChange(ch change) {
	w.noteBudgetChange(ch)
	switch ch.resource {
	case sessionsResource:
		if ch.old == nil || ch.new == nil ||
			ch.old.(*gamesv1.GameSession).Spec.ProfileRef != ch.new.(*gamesv1.GameSession).Spec.ProfileRef {
			w.refEpoch[nameOf(ch)]++
		}
	case deploymentsResource:
		if ch.new != nil && deploymentComplete(ch.new.(*appsv1.Deployment)) && !worldDeliversLive(ch.new.(*appsv1.Deployment), nameOf(ch)) {
			// A moved session whose Deployment completed has moved: a later
			// rollout of it (its own spec changed) is no move of the profile.
			d := ch.new.(*appsv1.Deployment)
			for _, set := range w.moving {
				if set[d.Name] == d.UID {
					delete(set, d.Name)
				}
			}
			for _, set := range w.profileMoving {
				if set[d.Name].uid == d.UID && !set[d.Name].live {
					delete(set, d.Name)
				}
			}
		}
		if ch.author == byController || ch.old == nil || ch.new == nil {
			return
		}
		o, n := ch.old.(*appsv1.Deployment), ch.new.(*appsv1.Deployment)
		if mountedConfigMap(o) != mountedConfigMap(n) ||
			o.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] != n.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] {
			w.disturbed[n.Name]++
		}
	}
}

// noteProfileSeen is told of each profile the controller's cache receives
// (nil: it left the cache): a content the controller had not seen before
// starts a new epoch. The epochs follow the cache, not the server: the
// controller can only go by the content it has seen, and a cache that skips
// an edit that was undone sees no change.
func (w *world) noteProfileSeen(name string, p *corev1.ConfigMap) {
	seen := ""
	if p != nil {
		seen = string(p.UID) + "/" + ProfileHash(p)
	}
	if w.seenProfile[name] != seen {
		w.seenProfile[name] = seen
		w.profileEpoch[name]++
	}
	w.noteContentSeen(name, p)
}

// noteRolloutWritten is told of each ProfileRollout status the controller
// wrote: a halt it records must hold while the profile has that content.
func (w *world) noteRolloutWritten(r *gamesv1.ProfileRollout) {
	p := w.caches[profilesResource].profile(r.Name)
	if p == nil {
		return
	}
	hash, epoch := ProfileHash(p), w.profileEpoch[r.Name]
	st := r.Status
	w.checkLiveReadyCount(r)
	if h, ok := w.halts[r.Name]; ok && h.epoch == epoch && h.hash == hash && st.HaltedHash != hash {
		w.violate("halt-released", "ProfileRollout %s written with haltedHash %q, but the rollout of %s halted and the profile's content has not changed since",
			r.Name, st.HaltedHash, hash)
	}
	if st.HaltedHash != "" && st.HaltedHash == hash {
		w.covered["halt recorded"]++
		if _, ok := w.halts[r.Name]; !ok || w.halts[r.Name].epoch != epoch {
			w.halts[r.Name] = haltRecord{hash: hash, epoch: epoch}
		}
	}
}

// checkMove is told of each controller write of a Deployment: a move
// changes what the session runs, its content or how it is delivered
// (contentOf, world_live_test.go), from another content of its profile; a
// start, from none.
func (w *world) checkMove(before, after *appsv1.Deployment) {
	s := w.caches[sessionsResource].session(after.Name)
	if s == nil {
		return
	}
	var lp *corev1.ConfigMap
	if w.live.on {
		// Written, if at all, before the Deployment in the same sync.
		lp = w.liveProfileOf(after.Name)
	}
	hash, live := contentOf(s, after, lp)
	if hash == "" {
		return
	}
	from, fromLive := contentOf(s, before, lp)
	if from == hash && fromLive == live {
		return // not a move
	}
	w.checkContentMove(s, after, from, fromLive, hash, live, fmt.Sprintf("Deployment %s", after.Name), before)
}

// checkContentMove checks a move of the session of Deployment d, the
// controller's write of what (the Deployment, or its live profile), from
// content from (none for a start) to content hash, each delivered live or
// not. before is the Deployment before a write of it, nil else.
func (w *world) checkContentMove(s *gamesv1.GameSession, d *appsv1.Deployment, from string, fromLive bool, hash string, live bool,
	writer string, before *appsv1.Deployment) {
	profile := profileNameOf(s.Spec.ProfileRef)
	start := from == ""
	what := fmt.Sprintf("moved from revision %s", worldRevisionName(d.Namespace, profile, from))
	if start {
		what = fmt.Sprintf("started (it mounted %q)", mountedConfigMap(before))
	}
	if w.live.on {
		what = fmt.Sprintf("%s (%s: live %t, was %t)", what, writer, live, fromLive)
	}
	// What it moved for: only a live change within live delivery restarts
	// no game server.
	liveChange := live && fromLive

	key := moveKey{name: d.Name, profile: profile, hash: hash, uid: d.UID,
		epoch: w.profileEpoch[profile], refEpoch: w.refEpoch[d.Name], disturbed: w.disturbed[d.Name],
		live: live, delivery: w.live.deliveryEpoch[profile]}
	if w.moveCount[key]++; w.moveCount[key] > 1 {
		w.violate("moved-twice", "Deployment %s %s onto revision %s for the %d. time, with nothing in between that set it back",
			d.Name, what, worldRevisionName(d.Namespace, profile, hash), w.moveCount[key])
	}

	if h, ok := w.halts[profile]; ok && h.hash == hash && h.epoch == w.profileEpoch[profile] {
		stable := ""
		if r := w.server.rollout(profile); r != nil {
			stable = r.Status.StableHash
		}
		if !start || (stable != "" && stable != hash && w.caches[revisionsResource].revision(worldRevisionName(d.Namespace, profile, stable)) != nil) {
			w.violate("halt-moved", "Deployment %s %s onto revision %s, whose rollout halted (stable %q)",
				d.Name, what, worldRevisionName(d.Namespace, profile, hash), stable)
		}
	}
	if start {
		w.covered["start"]++
		if live {
			w.covered["live start"]++
		}
		return
	}
	w.covered["move"]++
	switch {
	case liveChange:
		w.covered["live move"]++
		w.live.liveMoves[profile+"/"+hash+"/"+d.Name] = true
	case live != fromLive:
		w.covered["delivery switch move"]++
		if live {
			w.live.liveMoves[profile+"/"+hash+"/"+d.Name] = true
		}
	}
	cached := w.caches[profilesResource].profile(profile)
	if cached != nil && ProfileHash(cached) == hash && worldPolicy(cached).Paused {
		w.violate("paused-moved", "Deployment %s %s onto revision %s while the controller's cache shows the rollout policy %s",
			d.Name, what, worldRevisionName(d.Namespace, profile, hash), describePolicy(cached.Annotations))
	}
	w.checkMatchSafeMove(s, d, profile, hash, what, liveChange, live)
	w.checkBudget(d, profile, hash, what)
	w.checkProfileBudget(d, profile, what, live, hash)
}

// checkBudget checks a move of Deployment d onto content hash of profile
// against the rollout's max-rolling.
func (w *world) checkBudget(d *appsv1.Deployment, profile, hash, what string) {
	budget, paced := w.budgetOf(profile)
	if !paced {
		return
	}
	set := w.moving[profile+"/"+hash]
	if set == nil {
		set = map[string]types.UID{}
		w.moving[profile+"/"+hash] = set
	}
	for name, uid := range set {
		// Still a member of the rollout (its session there, referencing the
		// profile, controlling the Deployment, not being deleted: its game
		// servers then go, they do not restart) and moving.
		cur, s := w.server.deployment(name), w.server.session(name)
		if cur == nil || cur.UID != uid || cur.DeletionTimestamp != nil || !w.runsOnServer(s, cur, profile, hash) ||
			s == nil || s.DeletionTimestamp != nil || !uses(s, profile) || !controlledBy(cur, s.UID) {
			delete(set, name)
		}
	}
	set[d.Name] = d.UID
	w.covered["paced move"]++
	if len(set) == budget {
		w.covered["budget filled"]++
	}
	if len(set) > budget {
		w.violate("budget-exceeded", "Deployment %s %s onto revision %s: %d moved sessions not Ready (%s), max-rolling allows %d",
			d.Name, what, worldRevisionName(d.Namespace, profile, hash), len(set), strings.Join(slices.Sorted(maps.Keys(set)), ", "), budget)
	}
}

// runsOnServer reports whether a moved session still rolls its move onto
// content hash of profile on the server: it runs that content, and, by
// restart, its Deployment has not completed (live moves end in
// pruneLiveMoves, once every pod applied them).
func (w *world) runsOnServer(s *gamesv1.GameSession, d *appsv1.Deployment, profile, hash string) bool {
	if !w.live.on {
		return mountsRevision(d, profile, hash) && !deploymentComplete(d)
	}
	held, live := contentOf(s, d, w.liveProfileOf(d.Name))
	return held == hash && (live || !deploymentComplete(d))
}

// restartInProfile is a move of a session's Deployment that counts among its
// profile's max-rolling, whatever its kind: the Deployment, and the content
// and inputs its template runs after it; live, a move of content delivered
// live, which ends with acknowledgments (pruneLiveMoves).
type restartInProfile struct {
	uid      types.UID
	template string
	live     bool
	hash     string
}

// templateMoved is what a move moves a Deployment to: the content it runs
// and the data of its inputs; for a template that delivers live, the
// content its live profile holds on the server.
func (w *world) templateMoved(d *appsv1.Deployment) string {
	if w.live.on && worldDeliversLive(d, d.Name) {
		return "live " + liveHash(w.liveProfileOf(d.Name)) + "|" + worldInputsRun(d)
	}
	return d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] + "|" + worldInputsRun(d)
}

// checkProfileBudget checks a move of Deployment d, of any kind, against
// its profile's max-rolling over every kind of move.
// live is a move of content hash delivered live, which ends once every pod
// applied it.
func (w *world) checkProfileBudget(d *appsv1.Deployment, profile, what string, live bool, hash string) {
	budget, paced := w.budgetOf(profile)
	if !paced {
		return
	}
	set := w.profileMoving[profile]
	if set == nil {
		set = map[string]restartInProfile{}
		w.profileMoving[profile] = set
	}
	for name, m := range set {
		// Still a member of the profile's rollouts, and still rolling what
		// it moved to: a move that failed holds back moves of its own kind
		// only, which the budget check and the brake cover.
		cur, s := w.server.deployment(name), w.server.session(name)
		if cur == nil || cur.UID != m.uid || cur.DeletionTimestamp != nil || w.templateMoved(cur) != m.template ||
			!m.live && deploymentComplete(cur) || m.live && w.liveSettled(name, m.hash, true) ||
			cur.Spec.Paused || timedOutCondition(cur) != nil ||
			s == nil || s.DeletionTimestamp != nil || !uses(s, profile) || !controlledBy(cur, s.UID) {
			delete(set, name)
		}
	}
	set[d.Name] = restartInProfile{uid: d.UID, template: w.templateMoved(d), live: live, hash: hash}
	w.covered["profile budget move"]++
	if len(set) == budget {
		w.covered["profile budget filled"]++
	}
	if len(set) > budget {
		w.violate("profile-budget-exceeded", "Deployment %s %s: %d sessions of profile %s moving (%s), max-rolling allows %d",
			d.Name, what, len(set), profile, strings.Join(slices.Sorted(maps.Keys(set)), ", "), budget)
	}
}

// budgetOf returns the most sessions the profile's policy lets move at
// once, as generously as the server's and the controller's cache's view of
// the policy and the number of sessions allow, and false if either view is
// unpaced.
func (w *world) budgetOf(profile string) (int, bool) {
	var policies []rollout.Policy
	for _, p := range []*corev1.ConfigMap{w.server.profile(profile), w.caches[profilesResource].profile(profile)} {
		if p == nil {
			continue
		}
		policy := worldPolicy(p)
		if policy.Unpaced() {
			return 0, false
		}
		policies = append(policies, policy)
	}
	if len(policies) == 0 {
		return 0, false
	}
	// The moves for new inputs count their max-rolling over every session
	// that may use the profile, with a Deployment or not.
	totals := []int{len(w.serverMembers(profile)), len(w.cachedMembers(profile)), w.sessionsUsing(profile)}
	budget := 0
	for _, policy := range policies {
		for _, n := range totals {
			members := make([]rollout.Member, max(n, 1))
			for i := range members {
				members[i].Name = fmt.Sprint(i)
			}
			budget = max(budget, rollout.Decide(policy, members, rollout.Memory{}, w.clock.Now()).MaxRolling)
		}
	}
	return budget, true
}

// member is a session of a profile with a Deployment of its own, as the
// server shows them to a watch filtered on the managed-by label.
type member struct {
	session    *gamesv1.GameSession
	deployment *appsv1.Deployment
}

func (w *world) serverMembers(profile string) []member {
	var out []member
	for _, s := range w.server.sessions() {
		if !uses(s, profile) || s.DeletionTimestamp != nil || (crossNamespace(s) && !w.grantedOnServer()) {
			continue
		}
		// As the controller's watch sees them: a Deployment without the
		// managed-by label is outside its cache.
		if d := w.server.deployment(s.Name); d != nil && d.DeletionTimestamp == nil && controlledBy(d, s.UID) &&
			d.Labels[worldManagedByLabel] == worldManagedByValue {
			out = append(out, member{s, d})
		}
	}
	return out
}

// sessionsUsing counts the sessions that may use the profile, in the
// server or the cache, whichever has more.
func (w *world) sessionsUsing(profile string) int {
	server, cached := 0, 0
	for _, s := range w.server.sessions() {
		if uses(s, profile) && s.DeletionTimestamp == nil && (!crossNamespace(s) || w.grantedOnServer()) {
			server++
		}
	}
	for _, obj := range w.caches[sessionsResource].indexer.List() {
		if s := obj.(*gamesv1.GameSession); uses(s, profile) && s.DeletionTimestamp == nil && (!crossNamespace(s) || w.grantedInCache()) {
			cached++
		}
	}
	return max(server, cached)
}

func (w *world) cachedMembers(profile string) []string {
	var out []string
	for _, obj := range w.caches[sessionsResource].indexer.List() {
		s := obj.(*gamesv1.GameSession)
		if !uses(s, profile) || s.DeletionTimestamp != nil || (crossNamespace(s) && !w.grantedInCache()) {
			continue
		}
		if d := w.caches[deploymentsResource].deployment(s.Name); d != nil && d.DeletionTimestamp == nil && controlledBy(d, s.UID) {
			out = append(out, s.Name)
		}
	}
	return out
}

// failedOnTarget reports whether the Deployment controller gave up on d's
// current template: its condition is of the current generation, and does
// not name a ReplicaSet of another revision or of other data of its inputs
// (one kept from before a rollback, see kcmStatus), as the controller's
// progressDeadlineExceeded judges it.
func (w *world) failedOnTarget(d *appsv1.Deployment) bool {
	c := progressingOf(d.Status)
	if d.Status.ObservedGeneration < d.Generation || c == nil ||
		c.Status != corev1.ConditionFalse || c.Reason != "ProgressDeadlineExceeded" {
		return false
	}
	rs, ok := w.server.get(replicaSetsResource, timedOutReplicaSet(c.Message)).(*appsv1.ReplicaSet)
	if !ok || rs == nil {
		return true
	}
	ofReplicaSet := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: rs.Spec.Template}}
	return mountedRevision(&rs.Spec.Template) == mountedRevision(&d.Spec.Template) && worldInputsRun(ofReplicaSet) == worldInputsRun(d)
}

// waitsForRollout reports whether a session, as the sync just run left its
// status, waits for its rollout's turn, a plan, its revision, or room in the
// cluster-wide budget: a sync that wrote nothing then has not found its
// Deployment in order, only not yet due. That is the status the sync wrote,
// or, if it wrote none, the one its cache shows, which the sync found still
// true. Not the server's: status is written only when it differs from the
// cached copy, so the server may hold another sync's write that the cache
// has yet to show (a budget wait found again on a stale copy that already
// said so, while the server says the session runs its current revision).
func (w *world) waitsForRollout(name string) bool {
	s := w.caches[sessionsResource].session(name)
	if w.syncWroteStatus {
		s = w.server.session(name)
	}
	if s == nil {
		return false
	}
	c := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileUpToDate)
	return c != nil && c.Status == metav1.ConditionFalse &&
		(slices.Contains(heldReasons, c.Reason) || c.Reason == gamesv1.ReasonRevisionPending ||
			c.Reason == gamesv1.ReasonWaitingForClusterBudget)
}

func b2i32(b bool) int32 { return int32(b2i(b)) }

// ---- Checked at rest ----

// rolloutOf returns the profile's ProfileRollout on the server, if it is
// the profile's own.
func (w *world) rolloutOf(profile *corev1.ConfigMap) *gamesv1.ProfileRollout {
	r := w.server.rollout(profile.Name)
	if r == nil || len(r.OwnerReferences) != 1 || r.OwnerReferences[0].UID != profile.UID {
		return nil
	}
	return r
}

// rolloutBlockedReason returns the session reason a rollout at rest
// explains, "" if it is not visibly stopped.
func rolloutBlockedReason(r *gamesv1.ProfileRollout) string {
	st := r.Status
	switch {
	case conditionIs(meta.FindStatusCondition(st.Conditions, gamesv1.ConditionRevisionAvailable), metav1.ConditionFalse, ""):
		return gamesv1.ReasonRevisionUnavailable
	case st.Phase == gamesv1.RolloutPhaseHalted:
		return gamesv1.ReasonRolloutHalted
	case st.Phase == gamesv1.RolloutPhasePaused:
		return gamesv1.ReasonRolloutPaused
	case st.Phase == gamesv1.RolloutPhaseWaiting:
		return gamesv1.ReasonOutsideWindow
	case conditionIs(meta.FindStatusCondition(st.Conditions, gamesv1.ConditionComplete), metav1.ConditionFalse, gamesv1.ReasonSessionsDeferred):
		return gamesv1.ReasonSessionBusy
	case conditionIs(meta.FindStatusCondition(st.Conditions, gamesv1.ConditionStalled), metav1.ConditionTrue, "") && len(st.Blocked) > 0:
		return gamesv1.ReasonRolloutBlocked
	}
	return ""
}

// withoutCondition is a copy of r without the condition of that type.
func withoutCondition(r *gamesv1.ProfileRollout, condition string) *gamesv1.ProfileRollout {
	r = r.DeepCopy()
	meta.RemoveStatusCondition(&r.Status.Conditions, condition)
	return r
}

// heldReasons are the ProfileUpToDate reasons of a session that a rollout
// keeps off its profile's current content.
var heldReasons = []string{gamesv1.ReasonWaitingForTurn, gamesv1.ReasonRolloutPaused, gamesv1.ReasonRolloutHalted,
	gamesv1.ReasonRolloutBlocked, gamesv1.ReasonRevisionUnavailable, gamesv1.ReasonSessionBusy, gamesv1.ReasonOutsideWindow}

// heldAtRest reports whether a session at rest says its profile's rollout
// keeps it off the current content, and checks that the rollout agrees.
func (w *world) heldAtRest(s *gamesv1.GameSession, profile *corev1.ConfigMap, d *appsv1.Deployment) bool {
	upToDate := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileUpToDate)
	if upToDate == nil || upToDate.Status != metav1.ConditionFalse || !slices.Contains(heldReasons, upToDate.Reason) {
		return false
	}
	if d != nil && (mountsRevision(d, profile.Name, ProfileHash(profile)) && !w.live.on || w.live.on && w.runsCurrent(s, profile, d)) {
		return false // it runs the current content: checked as any other
	}
	r := w.rolloutOf(profile)
	if r == nil {
		w.violate("rollout-silent", "GameSession %s: ProfileUpToDate is %s, but profile %s has no ProfileRollout",
			s.Name, describeCondition(upToDate), profile.Name)
		return true
	}
	if w.busyAtRest(s, upToDate) {
		// Its rollout waits for the busy sessions; checkRolloutsAtRest sees
		// that it says so.
		return true
	}
	want := rolloutBlockedReason(r)
	if want == gamesv1.ReasonRevisionUnavailable && w.server.revision(worldRevisionName(s.Namespace, profile.Name, ProfileHash(profile))) != nil {
		// The revision the rollout cannot create is another namespace's:
		// for this session the rollout is as if it had it (a profile
		// shared by grant has a revision in each namespace).
		// Its Stalled condition says so too, and hides whatever else
		// stalls it: the session may say any reason that holds it.
		w.covered["revision unavailable in another namespace"]++
		other := withoutCondition(r, gamesv1.ConditionRevisionAvailable)
		if c := meta.FindStatusCondition(other.Status.Conditions, gamesv1.ConditionStalled); c != nil && c.Reason == gamesv1.ReasonRevisionCreateFailed {
			return true
		}
		want = rolloutBlockedReason(other)
	}
	switch {
	case want == gamesv1.ReasonSessionBusy && upToDate.Reason == gamesv1.ReasonWaitingForTurn:
		// Idle, behind a busy canary.
	case want == "":
		w.violate("rollout-silent", "GameSession %s: ProfileUpToDate is %s at rest, but ProfileRollout %s is %s: neither complete nor visibly stopped",
			s.Name, describeCondition(upToDate), r.Name, describeRollout(r))
	case want != upToDate.Reason:
		w.violate("condition-lie", "GameSession %s: ProfileUpToDate is %s at rest, but ProfileRollout %s is %s",
			s.Name, describeCondition(upToDate), r.Name, describeRollout(r))
	}
	return true
}

// checkRolloutsAtRest checks the ProfileRollout of every labelled profile.
func (w *world) checkRolloutsAtRest() {
	for _, p := range listAs[*corev1.ConfigMap](w.server.list(profilesResource)) {
		if p.Labels[gamesv1.ProfileLabel] != gamesv1.ProfileLabelValue {
			continue
		}
		r := w.rolloutOf(p)
		if r == nil {
			w.violate("rollout-missing", "profile %s (%s) has no ProfileRollout of its own at rest", p.Name, p.UID)
			continue
		}
		hash := ProfileHash(p)
		st := r.Status
		if st.TargetHash != hash {
			w.violate("rollout-lie", "ProfileRollout %s targets %q, but the profile's content is %s", r.Name, st.TargetHash, hash)
			continue
		}
		var total, moved, ready, failed int32
		names := map[string]bool{}
		for _, m := range w.serverMembers(p.Name) {
			total++
			// As the rollout names its members: those of another namespace
			// than the profile's by namespace and name.
			names[memberName(p.Namespace, m.session.Namespace+"/"+m.session.Name)] = true
			if w.liveMemberOf(m) {
				isMoved, isReady, isFailed := w.liveMemberAtRest(m, p)
				moved, ready, failed = moved+b2i32(isMoved), ready+b2i32(isReady), failed+b2i32(isFailed)
				continue
			}
			if !mountsRevision(m.deployment, p.Name, hash) || worldPolicyLive(p) == "live" {
				// By restart, a session of a live profile is yet to switch.
				continue
			}
			moved++
			if deploymentComplete(m.deployment) {
				ready++
			}
			if w.failedOnTarget(m.deployment) {
				failed++
			}
		}
		if st.TotalSessions != total || st.MovedSessions != moved || st.ReadySessions != ready || st.FailedSessions != failed {
			w.violate("rollout-lie", "ProfileRollout %s says %d moved, %d ready, %d failed of %d; the server shows %d, %d, %d of %d",
				r.Name, st.MovedSessions, st.ReadySessions, st.FailedSessions, st.TotalSessions, moved, ready, failed, total)
		}
		for _, b := range st.Blocked {
			if !names[b.Name] {
				w.violate("rollout-lie", "ProfileRollout %s names blocked session %s, which is not a session of the profile with a Deployment", r.Name, b.Name)
			}
		}
		w.liveRolloutAtRest(r, p)
		w.covered["at rest "+string(st.Phase)]++
		if len(st.Blocked) > 0 {
			w.covered["at rest blocked"]++
		}
		if rolloutBlockedReason(r) == gamesv1.ReasonRevisionUnavailable {
			w.covered["at rest revision unavailable"]++
		}
		switch st.Phase {
		case gamesv1.RolloutPhaseComplete:
			if moved != total {
				w.violate("rollout-lie", "ProfileRollout %s is Complete, but %d of %d sessions run revision %s", r.Name, moved, total, st.TargetRevision)
			}
		case gamesv1.RolloutPhasePaused:
			if !worldPolicy(p).Paused {
				w.violate("rollout-lie", "ProfileRollout %s is Paused, but the policy is %s", r.Name, describePolicy(p.Annotations))
			}
		case gamesv1.RolloutPhaseHalted:
			if st.HaltedHash != hash {
				w.violate("rollout-lie", "ProfileRollout %s is Halted, but its haltedHash is %q", r.Name, st.HaltedHash)
			}
		case gamesv1.RolloutPhaseWaiting:
			w.windowClosedAtRest(r, p)
		default:
			w.waitsOnBusyAtRest(r)
			if rolloutBlockedReason(r) == "" {
				ledger := ""
				if w.live.on {
					ledger = "; the ledger's moves: " + w.describeLedgerMoves()
				}
				w.violate("rollout-silent", "ProfileRollout %s is %s at rest: neither complete nor visibly stopped%s", r.Name, describeRollout(r), ledger)
			}
		}
	}
}

func describeRollout(r *gamesv1.ProfileRollout) string {
	st := r.Status
	var b strings.Builder
	fmt.Fprintf(&b, "[phase %s, target %s, stable %q, halted %q, %d/%d moved, %d ready, %d failed, blocked %v",
		st.Phase, st.TargetHash, st.StableHash, st.HaltedHash, st.MovedSessions, st.TotalSessions, st.ReadySessions, st.FailedSessions, st.Blocked)
	for _, c := range st.Conditions {
		fmt.Fprintf(&b, ", %s=%s/%s", c.Type, c.Status, c.Reason)
	}
	b.WriteString("]")
	return b.String()
}

// replicaSetHasPods reports whether a ReplicaSet wants pods: those it has
// are recreated when evicted, and need their revision. The pods of one
// scaled to zero are on their way out and are not replaced; they keep the
// files they mounted.
func replicaSetHasPods(rs *appsv1.ReplicaSet) bool {
	return ptr.Deref(rs.Spec.Replicas, 1) > 0
}
