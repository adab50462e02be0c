package faults

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/example/gamesession-controller/internal/testutil"
)

// TestFaultAPIServerDown stops kube-apiserver in the middle of a fan-out and
// starts it again after the outage. The controller process rides it out:
// the same process converges without a restart, logs the outage once when
// it begins and once when it ends (not once per failed request), and its
// /readyz tells the truth throughout, sampled every second: passing before,
// failing while the API server is away, passing again after. /healthz passes
// throughout: restarting the controller would not bring the API server back.
func TestFaultAPIServerDown(t *testing.T) {
	e := newEnv(t)
	n := e.size.sessions
	tracker := e.trackRollouts()
	p := e.startController("controller", e.slowFlags()...)
	e.waitReadyz(p)
	readyAt := time.Now()
	probes := sampleProbes(t, p)
	before := e.generations()

	hash := e.editProfile()
	tracker.waitCarrying(hash, n/3, time.Minute)
	tracker.stop() // its watch could not resume across the restart anyway
	down := time.Now()
	if err := cp.StopAPIServer(); err != nil {
		t.Fatalf("stop kube-apiserver: %v", err)
	}
	stopped := time.Now()
	// The outage itself, counted from the stop: kube-apiserver closes its
	// listener at once on SIGTERM, though its process lingers (see
	// controlplane.StopAPIServer). Nothing to wait for but time.
	time.Sleep(time.Until(down.Add(e.size.outage)))
	restarting := time.Now()
	if err := cp.StartAPIServer(e.ctx); err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	up := time.Now()
	t.Logf("kube-apiserver stopped for %s (its process took %s to exit), ready again %s after its start",
		restarting.Sub(down).Round(time.Millisecond), stopped.Sub(down).Round(time.Millisecond), up.Sub(restarting).Round(time.Millisecond))

	e.waitConverged("after the outage", hash)
	converged := time.Now()
	samples := probes()

	if state := p.ExitState(); state != "" {
		t.Fatalf("the controller exited: %s", state)
	}
	// A process cannot have been replaced under the same PID, but an in-process
	// restart would start the controller again.
	if starts := p.LogLines(regexp.MustCompile(`"Starting controller"`)); len(starts) != 1 {
		t.Errorf("the controller started %d times, want once:\n%s", len(starts), strings.Join(starts, "\n"))
	}
	patchedBefore, patchedAfter := e.patchedAround(down, restarting)
	t.Logf("Deployments last patched before the outage: %d, after it: %d (of %d)", patchedBefore, patchedAfter, n)
	if patchedBefore == 0 || patchedAfter == 0 {
		t.Errorf("the outage did not cut the fan-out in two: %d Deployments patched before it, %d after", patchedBefore, patchedAfter)
	}
	e.checkRolledOnce(before)

	// The controller's API server check is fresh for a second; the probe
	// that finds it stale answers with it and starts a new one, whose
	// result the next probe, a second later, gives: three seconds of slack
	// at each edge.
	const slack = 3 * time.Second
	checkProbes(t, samples, []probeWindow{
		{what: "before the outage", from: readyAt, to: down, wantReady: true},
		{what: "during the outage", from: down.Add(slack), to: restarting, wantReady: false, wantBody: "API server unreachable",
			minSamples: int((e.size.outage-slack)/time.Second) - 2},
		{what: "after the outage", from: up.Add(slack), to: converged, wantReady: true},
	})

	lost := p.LogLines(regexp.MustCompile(`The API server is unavailable`))
	back := p.LogLines(regexp.MustCompile(`The API server is available again`))
	if len(lost) != 1 || len(back) != 1 {
		t.Errorf("the outage was logged %d times when it began and %d times when it ended, want once each:\n%s",
			len(lost), len(back), strings.Join(append(lost, back...), "\n"))
	}
	// For the record: what else the outage left in the log, by the line of
	// code that logged it.
	refused := p.LogLines(regexp.MustCompile(`connection refused`))
	bySource := map[string]int{}
	for _, line := range refused {
		bySource[sourceRE.FindString(line)]++
	}
	t.Logf("%d log lines mention \"connection refused\", by source: %v", len(refused), bySource)
}

// sourceRE finds the file:line of a klog line.
var sourceRE = regexp.MustCompile(`[\w.-]+\.go:\d+`)

// probeSample is one look at the controller's /readyz and /healthz.
type probeSample struct {
	start, end  time.Time
	ready, live int // HTTP codes; 0 is no answer
	readyBody   string
}

// sampleProbes looks at the process's probes every second until the
// returned function is called, which returns the samples.
func sampleProbes(t *testing.T, p *testutil.ControllerProcess) func() []probeSample {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan []probeSample, 1)
	go func() {
		var samples []probeSample
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			s := probeSample{start: time.Now()}
			s.ready, s.readyBody = testutil.HTTPGet(ctx, p.HealthAddr, "/readyz")
			s.live, _ = testutil.HTTPGet(ctx, p.HealthAddr, "/healthz")
			s.end = time.Now()
			samples = append(samples, s)
			select {
			case <-ctx.Done():
				done <- samples
				return
			case <-tick.C:
			}
		}
	}()
	stop := sync.OnceValue(func() []probeSample {
		cancel()
		return <-done
	})
	t.Cleanup(func() { stop() })
	return stop
}

// probeWindow is a time span in which /readyz must give one answer.
type probeWindow struct {
	what       string
	from, to   time.Time
	wantReady  bool
	wantBody   string // in a failing answer: why
	minSamples int    // at least one
}

// checkProbes checks every sample taken wholly inside a window against it,
// and that /healthz passed in every sample up to the end of the last window.
func checkProbes(t *testing.T, samples []probeSample, windows []probeWindow) {
	t.Helper()
	for _, s := range samples {
		if s.end.After(windows[len(windows)-1].to) {
			break // the sampler was being stopped
		}
		if s.live != 200 {
			t.Errorf("/healthz = %d at %s, want 200 throughout", s.live, s.start.Format("15:04:05.000"))
		}
	}
	for _, w := range windows {
		in, wrong := 0, 0
		for _, s := range samples {
			if s.start.Before(w.from) || s.end.After(w.to) {
				continue
			}
			in++
			if (s.ready == 200) != w.wantReady || !strings.Contains(s.readyBody, w.wantBody) {
				wrong++
				if wrong <= 3 {
					t.Errorf("%s: /readyz = %d %q at %s", w.what, s.ready, strings.TrimSpace(s.readyBody), s.start.Format("15:04:05.000"))
				}
			}
		}
		if in < max(1, w.minSamples) {
			t.Errorf("%s: %d samples of /readyz, want at least %d", w.what, in, max(1, w.minSamples))
		}
		t.Logf("%s: %d of %d samples of /readyz wrong (want ready: %v)", w.what, wrong, in, w.wantReady)
	}
}
