//go:build unix

package controlplane

import (
	"errors"
	"os"
	"syscall"
)

var (
	sigTerm os.Signal = syscall.SIGTERM
	sigKill os.Signal = syscall.SIGKILL
)

// signalGroup signals the process group the child leads (Setpgid), which
// also reaches anything the component itself spawned.
func signalGroup(p *os.Process, sig os.Signal) error {
	if err := syscall.Kill(-p.Pid, sig.(syscall.Signal)); err != nil {
		return p.Signal(sig)
	}
	return nil
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
