//go:build linux

package testutil

import "syscall"

// childProcAttr has the kernel kill a controller process if the test binary
// dies without running its cleanups.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
