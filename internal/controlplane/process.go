package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// process is one running component.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	started time.Time

	done    chan struct{} // closed when the process has exited
	waitErr error         // valid after done

	mu       sync.Mutex
	stopping bool // set before we signal it, so its exit is not "unexpected"
}

// launch starts a component with its stdout and stderr in <dir>/<name>.log
// and adds it to the processes Stop stops.
func (cp *ControlPlane) launch(name, bin string, args ...string) (*process, error) {
	p, err := cp.startProcess(name, bin, args)
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.procs = append(cp.procs, p)
	return p, nil
}

// startProcess starts a component. Its log is appended to, so that a
// restarted component's log follows on from its previous life.
func (cp *ControlPlane) startProcess(name, bin string, args []string) (*process, error) {
	fmt.Fprintf(cp.out, "controlplane: starting %s...\n", name)
	logPath := filepath.Join(cp.dir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// The child keeps its own descriptor, so ours can be closed right away.
	defer logFile.Close()

	cmd := exec.Command(bin, args...)
	cmd.Dir = cp.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := spawn(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, started: time.Now(), done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

var (
	spawnOnce sync.Once
	spawnCh   = make(chan func())
)

// spawn starts cmd from one OS thread that never exits. Linux's Pdeathsig
// fires when the *thread* that forked the child ends, not the process, and
// the Go runtime ends threads whose goroutine exits while locked to them; a
// permanently locked spawner thread makes the signal mean "parent process
// died".
func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		go func() {
			runtime.LockOSThread()
			for f := range spawnCh {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnCh <- func() { errc <- cmd.Start() }
	return <-errc
}

// waitReady polls check until it reports true, the process exits, the
// readiness timeout passes or ctx ends.
func (cp *ControlPlane) waitReady(ctx context.Context, p *process, check func(context.Context) (bool, error)) error {
	return cp.waitReadySince(ctx, p, p.started, readyTimeout, check)
}

// waitReadySince is waitReady with another timeout, for a process that may
// have become unready after it started (a restart); begin is when, for the
// progress message.
func (cp *ControlPlane) waitReadySince(ctx context.Context, p *process, begin time.Time, timeout time.Duration, check func(context.Context) (bool, error)) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		// Each probe gets a short deadline so one hung request cannot eat the budget.
		probeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ok, err := check(probeCtx)
		cancel()
		if err != nil {
			return p.failure(fmt.Sprintf("readiness check failed: %v", err))
		}
		if ok {
			fmt.Fprintf(cp.out, "controlplane: %s ready in %.1fs\n", p.name, time.Since(begin).Seconds())
			return nil
		}
		select {
		case <-p.done:
			return p.failure(fmt.Sprintf("exited during start-up: %v", p.waitErr))
		case <-deadline.C:
			return p.failure(fmt.Sprintf("not ready within %s", timeout))
		case <-ctx.Done():
			return fmt.Errorf("controlplane: %s start-up aborted: %w", p.name, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// checkRunning reports the first component that has already exited.
func (cp *ControlPlane) checkRunning() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, p := range cp.procs {
		select {
		case <-p.done:
			return p.failure(fmt.Sprintf("exited: %v", p.waitErr))
		default:
		}
	}
	return nil
}

// stop ends the process group: SIGTERM, then SIGKILL after grace. It returns
// an error only if the process had died before anyone asked it to.
func (p *process) stop(grace time.Duration, out io.Writer) error {
	p.mu.Lock()
	already := p.stopping
	p.stopping = true
	p.mu.Unlock()
	select {
	case <-p.done:
		if already {
			return nil
		}
		return fmt.Errorf("%s exited unexpectedly (%v); log: %s", p.name, p.waitErr, p.logPath)
	default:
	}
	_ = signalGroup(p.cmd.Process, sigTerm)
	select {
	case <-p.done:
	case <-time.After(grace):
		fmt.Fprintf(out, "controlplane: %s still running %s after SIGTERM, killing it\n", p.name, grace)
		_ = signalGroup(p.cmd.Process, sigKill)
		<-p.done
	}
	return nil
}

// failure builds a start-up error carrying the tail of the component's log.
func (p *process) failure(reason string) error {
	return fmt.Errorf("controlplane: %s %s\nlog %s, last lines:\n%s", p.name, reason, p.logPath, tail(p.logPath, 30))
}

// tail returns the last n lines of a file (reading at most its last 64 KiB).
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	const maxRead = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > maxRead {
		_, _ = f.Seek(-maxRead, io.SeekEnd)
	}
	data, _ := io.ReadAll(f)
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("    | ")
		b.Write(l)
		b.WriteByte('\n')
	}
	return b.String()
}
