//go:build linux

package controlplane

import "syscall"

// sysProcAttr puts the child in its own process group (so a terminal's
// Ctrl-C reaches only the test binary, which then stops components in order)
// and has the kernel SIGKILL it if the test binary dies without Stop.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
