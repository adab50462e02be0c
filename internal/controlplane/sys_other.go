//go:build !unix

package controlplane

import (
	"os"
	"syscall"
)

// Without process groups or graceful signals, stopping means killing.
var (
	sigTerm os.Signal = os.Kill
	sigKill os.Signal = os.Kill
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalGroup(p *os.Process, sig os.Signal) error { return p.Kill() }

// processAlive cannot be answered cheaply here; claiming "alive" means stale
// directories are never swept, which is the safe side.
func processAlive(int) bool { return true }
