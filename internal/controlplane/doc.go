// Package controlplane starts and stops a real, local Kubernetes control plane
// (etcd, kube-apiserver and optionally kube-controller-manager, kube-scheduler
// and kwok fake nodes) for integration tests, benchmarks and `make run`.
// [Start] (controlplane.go) is the entry point; test packages use
// [RunTestMain] (testing.go) as their whole TestMain, so that one control
// plane serves every test of the binary.
//
// The binaries come from hack/build-controlplane.sh (`make controlplane`);
// missing ones are an error, never a skip. Every process binds 127.0.0.1 only
// and lives in a fresh temporary directory that also holds its log
// (<Dir>/<component>.log), and dies with its parent where the OS allows
// (Pdeathsig on Linux). For fault injection, kube-apiserver can be stopped
// and started again, and etcd restarted (restart.go).
package controlplane
