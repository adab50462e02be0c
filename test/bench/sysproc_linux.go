package main

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// Pdeathsig fires when the thread that forked the child exits, not the
// process. Children are therefore forked from one goroutine locked to an OS
// thread that lives as long as the benchmark, so the signal means "the
// benchmark died" and nothing else.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

// startWithParent starts cmd so that the kernel kills it if the benchmark
// dies without stopping it (kill -9, a crash): no controller outlives a run.
func startWithParent(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread must not exit
			for r := range spawnReqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r := spawnReq{cmd: cmd, done: make(chan error, 1)}
	spawnReqs <- r
	return <-r.done
}
