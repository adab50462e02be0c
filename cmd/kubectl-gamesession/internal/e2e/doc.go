// Package e2e runs kubectl-gamesession against a real control plane
// (internal/controlplane: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok nodes, so that Deployments roll and pods become
// Ready) with the real controller binary reconciling a namespace: a profile
// edit rolls out for real, and the plugin's commands run in-process, through
// their cobra command and a kubeconfig file, as kubectl would run them.
//
// The package holds tests only.
package e2e
