// Command bench measures the GameSession controller against a real local
// control plane (etcd and kube-apiserver from bin/controlplane): how fast one
// profile edit reaches every session, what it costs the API server, what the
// controller holds in memory while the cluster fills with unrelated objects,
// how a paced rollout (a max-rolling budget on the profile) moves the
// sessions in waves, and what an edit delivered live (a ConfigMap per
// session, acknowledged by the game servers, which the benchmark stands in
// for) costs against the same edit delivered by restart (-live).
//
//	go run ./test/bench                     # quick: 1,000 sessions, a few minutes
//	go run ./test/bench -preset=full        # the 7,340 sessions, ~20 minutes
//	go run ./test/bench -sessions=2000 -unrelated=5000 -workers=32
//
// Every figure is taken side by side with a baseline in the same run, because
// this machine is shared and noisy: ratios hold, absolute times drift. The
// baseline of a fan-out is a plain client-go loop making as many Deployment
// writes with the same parallelism (the ceiling); the baseline of memory is
// the controller's informers with one unfiltered ConfigMap informer in place
// of its two label-filtered ones. The controller runs as a process of its
// own (built from this checkout unless -controller-bin names another), so its
// memory is its own and every start is a cold start.
//
// main.go holds the flags and the order of the run, scenarios.go, paced.go
// and live.go the measurements, and report.go the table, which it prints and
// writes, with the machine and the exact command, to -out
// (docs/bench/<preset>.md by default).
package main
