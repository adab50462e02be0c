package app

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"
)

// The values of --deployment-writes.
const (
	deploymentWritesAuto   = "auto"
	deploymentWritesUpdate = "update"
	deploymentWritesPatch  = "patch"
)

// apiTypesMinor is the Kubernetes minor version of the API types this
// controller is built with: k8s.io/api v0.37.x describes Kubernetes 1.37.
// TestAPITypesMinorMatchesGoMod keeps it in step with go.mod.
const apiTypesMinor = 37

// deploymentWritesFor resolves --deployment-writes, and reports whether the
// controller patches its Deployments (controller.Options.PatchDeployments).
//
// An update writes the cached Deployment back with the controller's fields
// changed, and the cache decoded it into this build's API types: a field the
// types lack is not in the copy, and the update erases it, whoever set it.
// kube-controller-manager writes its ReplicaSets this way, and may, as it is
// never newer than its API server. This controller may run against any
// cluster, so "auto" updates only when the API server is no newer than the
// types, and patches otherwise, or when either version cannot be told. It
// costs one request, at start.
func deploymentWritesFor(ctx context.Context, mode string, client discovery.DiscoveryInterface) (patch bool, err error) {
	logger := klog.FromContext(ctx)
	switch mode {
	case deploymentWritesUpdate:
		return false, nil
	case deploymentWritesPatch:
		return true, nil
	}
	typesMinor := apiTypesMinor
	info, err := client.ServerVersion()
	if err != nil {
		return false, fmt.Errorf("reading the API server's version for --deployment-writes=auto: %w", err)
	}
	major, minor, ok := serverVersion(info.Major, info.Minor)
	switch {
	case !ok:
		logger.Info("Deployments are written with patches: the API server's version does not parse", "major", info.Major, "minor", info.Minor)
		return true, nil
	case major != 1 || minor > typesMinor:
		logger.Info("Deployments are written with patches: the API server is newer than this build's API types, whose updates would erase the fields they lack",
			"server", info.GitVersion, "types", fmt.Sprintf("1.%d", typesMinor))
		return true, nil
	}
	logger.V(2).Info("Deployments are written with updates", "server", info.GitVersion, "types", fmt.Sprintf("1.%d", typesMinor))
	return false, nil
}

// moduleMinor is the minor of a module version "v0.MINOR.PATCH...".
func moduleMinor(version string) (int, bool) {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 || parts[0] != "0" {
		return 0, false
	}
	minor, err := strconv.Atoi(parts[1])
	return minor, err == nil
}

// serverVersion parses /version's major and minor; providers append a "+"
// to the minor ("37+").
func serverVersion(major, minor string) (int, int, bool) {
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(strings.TrimSuffix(minor, "+"))
	return ma, mi, err1 == nil && err2 == nil
}
