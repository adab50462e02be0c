// Command run-local is what `make run` runs when no KUBECONFIG is set: it
// starts a local control plane (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok with a few fake nodes), installs the CRD, applies
// artifacts/examples, and runs the controller in the foreground, through the
// same app.Run as the real binary. Ctrl-C stops the controller and tears the
// whole control plane down. The binaries come from `make controlplane`.
//
// It takes the controller's flags (and klog's) directly, beside its own
// --nodes, in one flag set: `make run ARGS='-v=4 --workers=4'`, or
// `bin/run-local -v=4 --nodes=5`. There is no `--` separator: Go's flag
// parsing stops at it, so anything after it would be ignored, and run-local
// refuses it. Metrics and health default to 127.0.0.1.
package main
