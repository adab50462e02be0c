package controller

// What the controllers keep beside the informers. Everything else they know
// they read from the caches at the start of each sync. Each piece exists
// because a cache cannot tell it, and each is keyed by the object it is
// about (a UID, or a key and the generation or write it awaits):
//
//	piece         what it holds                     why a cache cannot tell      written by          a restart or failover
//	------------  --------------------------------  ---------------------------  ------------------  ------------------------------------------
//	expectations  the Deployment generation each    the cache lags our own       session sync        loses them: at most one idle write per
//	(expectations session's last write produced,    writes                       (writeDeployment,   session, refused by its resourceVersion
//	.go)          by Deployment UID; the version    (a sync on the live profile  deliverLive),       (caches start in sync with every write
//	              each session's last write of its from before its write would   Deployment and      made before)
//	              live profile was made on          take it for what runs)       live profile events
//	revisions     revisions created, deleted or     the cache lags our own       both syncs,         needs none: caches start in sync with
//	(revision.go) newly mounted that the cache      writes; a revision deleted   revision and        every write made before
//	              does not show yet, by UID and     under a Deployment moving    Deployment events
//	              write                             to it breaks its pods
//	plans         each profile's latest rollout     computed, not stored: the    profile sync        recomputes it from the caches and the
//	(profilesync  plan with the canaries of its     session sync reads whose     (planRollout)       ProfileRollout, where what a rollout must
//	.go)          rotations, and the ProfileRollout turn it is                                       remember lives (halt, stable revision, start);
//	              last written                                                                       a rotation's canaries are picked by name
//	moves         the ledger of moves: who moves    a move is a decision of      session sync        rebuilt by seedLedger: every Deployment
//	(ledger.go,   to what, the starts of the last   ours, not a field of any     (admit, settle),    still rolling moves, and the minute's starts
//	fairshare.go) minute, who waits for a place,    object                       profile sync reads  come from the move-starts annotation; the
//	              by namespace for the cluster's                                                     queue's order is lost: the waiting sessions
//	              (the fair queue)                                                                   sync at start and queue again
//	fanOut        a profile change's delay, and     a delay is a time we chose   profile events,     loses the delay and the Deployments-first
//	(fanout.go)   which sessions it queued                                       session sync        order of a fan-out in flight, never a write
//	inputChanges  since when each session's change  the change is a difference   session sync        counts max-defer from the start: a busy
//	(inputs.go)   of its Secrets or ConfigMaps      between two caches, with no  (writeSession, act) session waits longer, never less
//	              has waited, for max-defer         time of its own
//	profileHashes the hash of each profile          a memo, by profile UID and   both syncs          loses nothing
//	(profile.go)  version                           resourceVersion
//	echoes        each session's status write whose the cache lags our own       session sync        loses them: the next event of each session
//	(expectations event needs no sync, by UID and the writes                       (writeStatus),      syncs it, as without them
//	.go)          resourceVersion it was made on                                 session events
//
// Live delivery (live.go) adds only its writes' expectations: what each
// session was delivered, and when, is written on its live profile, and
// what each game server applied on its pod; both come back through the
// caches, so a restart loses nothing of it (seedLedger counts the
// deliveries not yet applied as moves, and those of the last minute as
// moves started).
//
// The session lanes (lanes.go) are the session queue's storage, not state:
// a restart empties them with the queue. The watch of the digest key's
// Secret (digestkey.go) keeps the state it last reported, so that each
// change is said once; a restart says it again if it still holds.
type state struct {
	expectations *writeExpectations
	revisions    *revisionExpectations
	plans        *profilePlans
	moves        *moveLedger
	fanOut       *profileFanOut // made by NewController, which has the session queue
	inputChanges *inputChanges
	echoes       *statusEchoes
}

func newState(opts Options) *state {
	return &state{
		expectations: newWriteExpectations(opts.Clock),
		revisions:    newRevisionExpectations(opts.Clock),
		plans:        newProfilePlans(),
		moves:        newMoveLedger(opts.Clock, opts.MaxMovingSessions, opts.MaxMovesPerMinute),
		inputChanges: newInputChanges(),
		echoes:       newStatusEchoes(),
	}
}
