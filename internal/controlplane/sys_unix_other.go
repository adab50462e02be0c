//go:build unix && !linux

package controlplane

import "syscall"

// sysProcAttr: no Pdeathsig outside Linux; a killed test binary can leave
// components behind there.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
