package integration

import (
	"testing"

	"github.com/example/gamesession-controller/internal/testutil"
)

// controllerBinary builds cmd/gamesession-controller once per test binary,
// into the control plane's directory, which is removed with it.
func controllerBinary(t *testing.T) string {
	t.Helper()
	return testutil.ControllerBinary(t, cp.Dir())
}

// startControllerProcess runs the binary with the given kubeconfig, scoped to
// the test's namespace and serving metrics and probes on free loopback ports.
// env adds to the process environment. The process is killed when the test
// ends; its log is printed if the test failed.
func (e *env) startControllerProcess(name, kubeconfig string, env []string, args ...string) *testutil.ControllerProcess {
	e.t.Helper()
	args = append([]string{
		"--kubeconfig=" + kubeconfig,
		"--namespace=" + e.ns,
		"--profile-change-delay=0",
		"--workers=4",
		"-v=2",
	}, args...)
	return testutil.StartController(e.t, controllerBinary(e.t), name, env, args...)
}
