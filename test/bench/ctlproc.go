package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/example/gamesession-controller/pkg/controller"
)

// ctlProc is the controller binary running as a process of its own, so that
// its RSS is its own and a restart is a real cold start.
type ctlProc struct {
	name       string
	cmd        *exec.Cmd
	started    time.Time
	logPath    string
	metricsURL string
	healthURL  string
	exited     chan struct{}
	exitErr    error
	stopped    bool
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// budgetArgs turns the cluster-wide budget off for a binary that has one.
// The benchmark measures what a fan-out costs the API server; the budget
// would pace it (and, with no kube-controller-manager to report Deployments
// complete, hold every move after the first 500). A binary from before the
// budget (-compare-bin) has no such flags. Later args override these.
//
// A binary that tracks Secrets keeps its digest key where the artifacts'
// Role lets it, in the controller's namespace: outside a cluster it would
// look in "default".
func (e *env) budgetArgs(bin string) []string {
	if e.budgetFlags == nil {
		e.budgetFlags = map[string][]string{}
	}
	args, seen := e.budgetFlags[bin]
	if !seen {
		out, _ := exec.Command(bin, "--help").CombinedOutput()
		if strings.Contains(string(out), "-max-moving-sessions") {
			args = append(args, "--max-moving-sessions=0", "--max-moves-per-minute=0")
		}
		if strings.Contains(string(out), "-secret-digest-key") {
			args = append(args, "--secret-digest-key="+saNamespace+"/gamesession-controller-secret-digest-key")
		}
		e.budgetFlags[bin] = args
	}
	return args
}

// startController runs the binary with the SA kubeconfig, loopback-only
// metrics and health servers, and args.
func (e *env) startController(name string, args ...string) (*ctlProc, error) {
	metricsAddr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	healthAddr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	p := &ctlProc{
		name:       name,
		logPath:    filepath.Join(e.workDir, name+".log"),
		metricsURL: "http://" + metricsAddr + "/metrics",
		healthURL:  "http://" + healthAddr + "/readyz",
		exited:     make(chan struct{}),
	}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	all := append([]string{
		"--kubeconfig=" + e.saKubeconfig,
		"--metrics-bind-address=" + metricsAddr,
		"--health-probe-bind-address=" + healthAddr,
		fmt.Sprintf("--workers=%d", e.cfg.workers),
		fmt.Sprintf("--kube-api-qps=%g", e.cfg.qps),
		fmt.Sprintf("--kube-api-burst=%d", e.cfg.burst),
	}, append(e.budgetArgs(e.controllerBin), args...)...)
	p.cmd = exec.Command(e.controllerBin, all...)
	if len(e.controllerEnv) > 0 {
		p.cmd.Env = append(os.Environ(), e.controllerEnv...)
	}
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.started = time.Now()
	if err := startWithParent(p.cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	logf("controller %s started (pid %d): %s", name, p.cmd.Process.Pid, strings.Join(all[4:], " "))
	go func() {
		p.exitErr = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	e.running[p] = struct{}{}
	return p, nil
}

// pid is the controller's process, or this one when it runs in-process.
func (p *ctlProc) pid() int {
	if p.cmd == nil {
		return os.Getpid()
	}
	return p.cmd.Process.Pid
}

// stopController sends SIGTERM and, after a grace period, SIGKILL. Only the
// first call does anything.
func (e *env) stopController(p *ctlProc) error {
	if p.stopped {
		return nil
	}
	p.stopped = true
	delete(e.running, p)
	select {
	case <-p.exited:
		return fmt.Errorf("controller %s had exited: %v (log %s)", p.name, p.exitErr, p.logPath)
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	return nil
}

func (p *ctlProc) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("controller %s exited: %v; last lines of %s:\n%s", p.name, p.exitErr, p.logPath, tailFile(p.logPath, 15))
	default:
		return nil
	}
}

// waitReady polls /readyz, which turns 200 once every informer has synced.
func (p *ctlProc) waitReady(ctx context.Context) (time.Time, error) {
	for {
		if err := p.alive(); err != nil {
			return time.Time{}, err
		}
		if resp, err := httpClient.Get(p.healthURL); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now(), nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (p *ctlProc) scrape(ctx context.Context) (samples, error) {
	return scrapeURL(ctx, p.metricsURL)
}

func scrapeURL(ctx context.Context, url string) (samples, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return parseProm(string(b))
}

var queueLabel = map[string]string{"name": controller.Name}

// ctlState is what the benchmark reads from the controller's own metrics.
type ctlState struct {
	depth, unfinished, adds, syncs, conflicts, fanOuts float64
	requests                                           map[string]float64 // "method code" -> count
	heapInuse                                          float64
	// failed counts the syncs that ended in an error or a conflict, which
	// the queue retries after a backoff, and longWaits the session queue's
	// keys that waited in it over longQueueWait before a worker took them:
	// a fan-out's tail that is neither is not the queue's.
	failed, longWaits float64
}

// longQueueWait is the wait in the queue counted as long: a bucket bound of
// workqueue_queue_duration_seconds.
const longQueueWait = 10.0

func readState(ss samples) ctlState {
	st := ctlState{
		depth:      ss.sum("workqueue_depth", queueLabel),
		unfinished: ss.sum("workqueue_unfinished_work_seconds", queueLabel),
		adds:       ss.sum("workqueue_adds_total", queueLabel),
		syncs:      ss.sum("gamesession_controller_syncs_total", nil),
		conflicts:  ss.sum("gamesession_controller_syncs_total", map[string]string{"result": "conflict"}),
		fanOuts:    ss.sum("gamesession_controller_profile_fanout_sessions_count", nil),
		requests:   ss.by("rest_client_requests_total", nil, "method", "code"),
		heapInuse:  ss.sum("go_memstats_heap_inuse_bytes", nil),

		longWaits: waitsOver(ss, longQueueWait),
	}
	st.failed = st.conflicts + ss.sum("gamesession_controller_syncs_total", map[string]string{"result": "error"})
	return st
}

// waitsOver counts the session queue's keys that waited longer than bound,
// a bucket bound of workqueue_queue_duration_seconds (ExponentialBuckets
// print it as, for example, 9.999999999999999).
func waitsOver(ss samples, bound float64) float64 {
	all := ss.sum("workqueue_queue_duration_seconds_count", queueLabel)
	for le, n := range ss.by("workqueue_queue_duration_seconds_bucket", queueLabel, "le") {
		if v, err := strconv.ParseFloat(le, 64); err == nil && math.Abs(v-bound) < bound*1e-9 {
			return all - n
		}
	}
	return math.NaN()
}

// waitDrained returns once cond holds and the work queue is empty and idle
// in two scrapes 100ms apart with no item added in between; the time is that
// of the first of the two.
func (p *ctlProc) waitDrained(ctx context.Context, cond func(ctlState) bool) (time.Time, ctlState, error) {
	var prev ctlState
	var prevAt time.Time
	havePrev := false
	for {
		if err := p.alive(); err != nil {
			return time.Time{}, prev, err
		}
		at := time.Now()
		ss, err := p.scrape(ctx)
		if err == nil {
			st := readState(ss)
			idle := st.depth == 0 && st.unfinished == 0 && (cond == nil || cond(st))
			if idle && havePrev && st.adds == prev.adds && st.syncs == prev.syncs {
				return prevAt, st, nil
			}
			havePrev = idle
			prev, prevAt = st, at
		}
		select {
		case <-ctx.Done():
			return time.Time{}, prev, fmt.Errorf("controller %s did not drain: depth %g, syncs %g: %w", p.name, prev.depth, prev.syncs, ctx.Err())
		case <-time.After(drainPoll):
		}
	}
}

// drainPoll is how often waitDrained scrapes the controller's /metrics. Each
// scrape costs the controller CPU (the encoding, the session gauges): at
// 100ms it was a twentieth of the controller's CPU in a fan-out, which
// the CPU share would count against it. The idle time it reads is this
// precise.
const drainPoll = 250 * time.Millisecond

func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
