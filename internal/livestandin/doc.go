// Package livestandin stands in for the game servers of live sessions
// where none run: kwok's pods run no containers and mount no files. It does
// what a game server that follows pkg/profileack would do once the kubelet
// rewrote its files: for each running pod of a live session, it reads the
// revision the session's live profile holds (what the pod's .revision file
// would say) and acknowledges it on the pod.
//
// make run uses it so that the live rollout of the examples completes; the
// integration tests and the benchmark use it with answers of their own
// (late, refused, never).
package livestandin
