// Package rollout is the rollout policy of the GameSession controller: it
// decides which sessions of a profile may move to a new revision of it now.
//
// A profile is a ConfigMap shared by many GameSessions. When its data change,
// every session's Deployment has to move to the new, immutable revision, and
// each move restarts game servers. Moving them all at once is the default; a
// profile can instead pace the move with annotations (see [PolicyFor]):
//
//	rollout.games.example.com/max-rolling: "10%"  # sessions moving at once
//	rollout.games.example.com/canary: "1"         # sessions that go first
//	rollout.games.example.com/max-failed: "0"     # failures tolerated
//	rollout.games.example.com/paused: "true"      # stop admitting sessions
//	rollout.games.example.com/max-defer: "2h"     # how long busy sessions wait, in open window
//	rollout.games.example.com/window: "Mon-Fri 02:00-06:00 Europe/Berlin"
//
// The package is pure: no API clients, no clocks, no goroutines. The time a
// plan is made for is one of Decide's inputs. The
// controller reads a profile's [Policy] with [PolicyFor] (policy.go),
// describes each session of the profile as a [Member], from its informer
// caches, and [Decide] (decide.go) answers with a [Plan]. A restarted controller
// recomputes the same plan from the same caches, so Decide depends only on its
// inputs, and not on the order of the members.
//
// # Order
//
// Sessions move in the order of their names. Any fixed order would do; the
// name order is one that every controller replica, before and after a
// restart, agrees on without remembering anything.
//
// # Rounding
//
// Each value is a number of sessions ("10") or a percentage ("10%") of the
// profile's sessions. max-rolling rounds down, like a Deployment's
// maxUnavailable, but is at least 1 so that a rollout always progresses.
// canary rounds up, like maxSurge, so that "1%" of a small profile is still
// one canary rather than none. max-failed is a share of the sessions moved so
// far, not of all sessions, and rounds down: "10%" tolerates one failure once
// ten sessions have moved. Values larger than the profile mean all of it.
//
// # Canary
//
// The canaries are the first sessions in name order. They move first, within
// the max-rolling budget, and the other sessions wait until every canary runs
// the new revision and is Ready. A canary that never becomes Ready, for
// example because its Deployment failed, holds the rollout in the canary phase
// until someone fixes the profile or removes the annotation.
//
// # Budget
//
// A session is rolling from the moment it runs the new revision until its
// Deployment is Ready. At most max-rolling sessions are rolling at once, so a
// plan admits only as many sessions as the budget has room for; as rolling
// sessions become Ready, later plans admit more.
//
// # Brake
//
// When more than max-failed of the moved sessions report
// ProgressDeadlineExceeded, the rollout halts: nothing more moves until the
// profile's content changes (see Memory). A rollout whose every member moved
// with too many failures is halted too, not complete.
// "0" halts on the first failure. The brake takes precedence over a pause, so
// that the phase reports the more urgent condition.
//
// # Pause
//
// A paused rollout admits nothing, and neither does one whose annotations do
// not parse: a typo must not make a rollout faster than its author intended.
// Sessions that already moved stay where they are.
//
// # New sessions
//
// A session created during a rollout has no Deployment to move. It starts on
// the new revision once the rollout is past its canary and not stopped; in the
// canary phase, paused, halted or waiting for its window, it starts on the
// stable content ([Plan.StableHash]): the one whose rollout last completed,
// as the controller remembers it ([Memory]), or else the one most of the
// unmoved sessions run. So it does not bypass the gate.
//
// # Memory
//
// A plan is a function of what the caches show and of [Memory], which the
// controller keeps in the API (a ProfileRollout per profile): whether the
// brake halted the rollout towards the current target, and the stable
// content. A halt holds until the target changes, so that deleting or
// scaling the failed sessions cannot release it.
//
// # Busy members
//
// A busy member ([Member.Busy]: a match runs on its game servers) not on the
// target is deferred: never admitted, counted in [Plan.Deferred], neither as
// failed nor against max-rolling, until it is idle or it has waited the
// policy's MaxDefer of the time during which the rollout could have moved
// it: the time the maintenance window has been open since the rollout
// started ([Memory.Started]), or all of it without a window
// ([Policy.Defers], [Window.AfterOpen]; [Plan.DeferralEnds] says when). A
// closed window protects a match anyway, so it spends none of MaxDefer. A
// busy canary holds the canary phase like any other.
//
// # Maintenance window
//
// Outside the policy's [Window] the rollout is in [PhaseWaiting]: nothing is
// admitted, and [Plan.Resumes] says when the window opens. A halt and a
// pause come first. Inside it, [Plan.WindowCloses] says when it closes, so
// that the controller plans again then. Only its open time counts towards
// MaxDefer (see Busy members).
//
// # Blocked members
//
// A member that cannot progress ([Member.Blocked]: its Deployment paused by
// a user, or refusing the controller's writes) is never admitted past the
// canary, so it takes no slot from those that can move. One that holds a
// slot anyway (a canary, or a member that moved and then was paused or
// failed within what the brake tolerates) is listed in [Plan.Blocked], and
// [Plan.Stuck] says when nothing else can move: the controller reports both,
// so that a rollout never waits silently.
package rollout
