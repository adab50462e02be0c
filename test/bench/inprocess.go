package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
)

// profileFanOut runs the controller in this process through app.Run, the
// way main runs it, and records a CPU profile and allocation profiles of one
// fan-out of h with --profile-change-delay=0. In this process the
// benchmark's own work (the watch decoding, the scrapes) shows up too, under
// its own stacks.
func (e *env) profileFanOut(ctx context.Context, h *hotProfile) (fanRound, error) {
	var r fanRound
	if err := os.MkdirAll(e.cfg.profileDir, 0o755); err != nil {
		return r, err
	}
	metricsAddr, err := freeLoopbackAddr()
	if err != nil {
		return r, err
	}
	healthAddr, err := freeLoopbackAddr()
	if err != nil {
		return r, err
	}
	opts := app.NewOptions()
	opts.RESTConfig = rest.CopyConfig(e.saCfg)
	opts.Workers, opts.KubeAPIQPS, opts.KubeAPIBurst = e.cfg.workers, e.cfg.qps, e.cfg.burst
	opts.ProfileChangeDelay = 0
	// As the processes run (ctlproc.go): no Deployment completes without a
	// kube-controller-manager, so a cluster budget would stop the fan-out.
	opts.MaxMovingSessions, opts.MaxMovesPerMinute = 0, 0
	// The ServiceAccount may create the key in its own namespace only.
	opts.SecretDigestKey = saNamespace + "/gamesession-controller-secret-digest-key"
	opts.MetricsBindAddress, opts.HealthProbeBindAddress = metricsAddr, healthAddr

	p := &ctlProc{name: "in-process", metricsURL: "http://" + metricsAddr + "/metrics",
		healthURL: "http://" + healthAddr + "/readyz", exited: make(chan struct{}), started: time.Now()}
	runCtx, cancel := context.WithCancel(klog.NewContext(ctx, logr.Discard()))
	defer func() {
		cancel()
		<-p.exited
	}()
	go func() {
		p.exitErr = app.Run(runCtx, opts)
		close(p.exited)
	}()
	if _, err := p.waitReady(ctx); err != nil {
		return r, err
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Minute)
	defer wcancel()
	if _, _, err := p.waitDrained(wctx, func(s ctlState) bool { return s.syncs >= float64(e.totalSessions()) }); err != nil {
		return r, err
	}

	writeProfile := func(name string) error {
		f, err := os.Create(filepath.Join(e.cfg.profileDir, name))
		if err != nil {
			return err
		}
		defer f.Close()
		return pprof.Lookup("allocs").WriteTo(f, 0)
	}
	if err := writeProfile("allocs-before.pb.gz"); err != nil {
		return r, err
	}
	cpu, err := os.Create(filepath.Join(e.cfg.profileDir, "cpu.pb.gz"))
	if err != nil {
		return r, err
	}
	defer cpu.Close()
	if err := pprof.StartCPUProfile(cpu); err != nil {
		return r, err
	}
	// The API server's profile of the same fan-out, for where its time goes.
	apiProfile := make(chan error, 1)
	go func() {
		apiProfile <- e.apiServerProfile(ctx, filepath.Join(e.cfg.profileDir, "kube-apiserver-cpu.pb.gz"), apiServerProfileSeconds)
	}()
	r, err = e.fanOut(ctx, p, h, 10*time.Minute)
	pprof.StopCPUProfile()
	if perr := <-apiProfile; perr != nil {
		logf("kube-apiserver profile: %v", perr)
	}
	if err != nil {
		return r, err
	}
	if err := writeProfile("allocs-after.pb.gz"); err != nil {
		return r, err
	}
	logf("kube-apiserver: go tool pprof -top %s", filepath.Join(e.cfg.profileDir, "kube-apiserver-cpu.pb.gz"))
	logf("profiles in %s: go tool pprof -top %s; go tool pprof -sample_index=alloc_space -diff_base %s -top %s",
		e.cfg.profileDir, filepath.Join(e.cfg.profileDir, "cpu.pb.gz"),
		filepath.Join(e.cfg.profileDir, "allocs-before.pb.gz"), filepath.Join(e.cfg.profileDir, "allocs-after.pb.gz"))
	return r, nil
}

// apiServerProfileSeconds is how long the kube-apiserver's CPU profile of the
// profiled fan-out runs, from the edit: the 7,340-session fan-out's writes
// are done within it.
const apiServerProfileSeconds = 30

// apiServerProfile writes a CPU profile of the kube-apiserver (its
// /debug/pprof, on by default and open to the admin) over the next seconds
// to path.
func (e *env) apiServerProfile(ctx context.Context, path string, seconds int) error {
	data, err := e.admin.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", fmt.Sprint(seconds)).Timeout(2 * time.Duration(seconds) * time.Second).DoRaw(ctx)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
