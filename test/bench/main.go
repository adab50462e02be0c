package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

type config struct {
	preset          string
	sizes           []int
	profiles        int
	otherPerProfile int
	unrelated       int
	unrelatedSize   int
	workers         int
	qps             float64
	burst           int
	rounds          int
	variantRounds   int
	resync          time.Duration
	idlePeriods     int
	slowWindow      time.Duration
	burstEdits      int
	burstWindow     time.Duration
	settle          time.Duration
	out             string
	controllerBin   string
	controlplaneBin string
	profileDir      string
	skipMicro       bool
	variants        []string
	fanOutOnly      bool
	compareBin      string
	compareEnv      []string
	apiServerFlags  []string
	pacedMaxRolling string
	template        string
	busyShare       float64
	busyIdleOver    time.Duration
	tenants         int
	tenantSessions  int
	live            bool
}

// presets are the defaults of -preset; explicit flags override them.
var presets = map[string]map[string]string{
	"quick": {"sessions": "1000", "profiles": "50", "unrelated": "2000", "rounds": "3", "tenants": "50"},
	"full":  {"sessions": "1000,7340", "profiles": "500", "unrelated": "10000", "rounds": "5", "tenants": "50"},
}

func parseFlags(args []string) (config, bool, string, error) {
	defaults := app.NewOptions()
	var c config
	var sizes string
	var internalNoFilter bool
	var internalKubeconfig string
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&c.preset, "preset", "quick", "quick (1,000 sessions, 2,000 unrelated ConfigMaps, a few minutes) or full (1,000 and 7,340 sessions, 10,000 unrelated ConfigMaps, about an hour on 2 cores). Other flags override it.")
	fs.StringVar(&sizes, "sessions", "", "Comma-separated fan-out sizes: for each, one profile shared by that many sessions.")
	fs.IntVar(&c.profiles, "profiles", 0, "Profile ConfigMaps in all; those beyond the shared ones get -other-sessions sessions each, which a fan-out must leave alone.")
	fs.IntVar(&c.otherPerProfile, "other-sessions", 1, "Sessions of each other profile.")
	fs.IntVar(&c.unrelated, "unrelated", 0, "Unrelated, unlabelled ConfigMaps added for the memory measurement.")
	fs.IntVar(&c.unrelatedSize, "unrelated-size", 10<<10, "Bytes of data in each unrelated ConfigMap.")
	fs.IntVar(&c.workers, "workers", defaults.Workers, "Controller --workers, and the parallelism of the write-ceiling loop.")
	fs.Float64Var(&c.qps, "qps", defaults.KubeAPIQPS, "Controller --kube-api-qps.")
	fs.IntVar(&c.burst, "burst", defaults.KubeAPIBurst, "Controller --kube-api-burst.")
	fs.IntVar(&c.rounds, "rounds", 0, "Fan-out rounds per size and setting, each paired with a ceiling round.")
	fs.IntVar(&c.variantRounds, "variant-rounds", 2, "Rounds of the -ceiling-variants.")
	fs.DurationVar(&c.resync, "resync-period", 10*time.Second, "Controller --resync-period for the idle measurement.")
	fs.IntVar(&c.idlePeriods, "idle-periods", 3, "Resync periods the idle measurement lasts.")
	fs.DurationVar(&c.slowWindow, "default-qps-window", 20*time.Second, "How long the fan-out with client-go's default 5 QPS runs before it is extrapolated.")
	fs.IntVar(&c.burstEdits, "burst-edits", 20, "Edits of one profile in the burst measurement.")
	fs.DurationVar(&c.burstWindow, "burst-window", time.Second, "Time the burst's edits are spread over.")
	fs.DurationVar(&c.settle, "settle", 5*time.Second, "Idle time before memory is read.")
	fs.StringVar(&c.out, "out", "", "Markdown file for the results. Default docs/bench/<preset>.md; \"-\" prints only.")
	fs.StringVar(&c.controllerBin, "controller-bin", "", "Controller binary to measure. Default: built from this checkout.")
	fs.StringVar(&c.controlplaneBin, "controlplane-bin", "", "Directory of etcd and kube-apiserver. Default: bin/controlplane.")
	fs.StringVar(&c.profileDir, "profile-dir", "", "If set, also run one fan-out with the controller in-process and write CPU and allocation profiles here, and profile the kube-apiserver under each status-only write-cost variant.")
	fs.BoolVar(&c.skipMicro, "skip-micro", false, "Skip the index-versus-scan micro-benchmark.")
	var compareEnv, apiServerFlags string
	fs.StringVar(&compareEnv, "compare-env", "", "Space-separated NAME=value pairs added to the environment of the -compare-bin controller, say KUBE_FEATURE_ClientsAllowCBOR=true: the same binary may be compared with itself under client-go feature gates.")
	fs.StringVar(&apiServerFlags, "apiserver-flags", "", "Space-separated flags added to kube-apiserver's, say --feature-gates=CBORServingAndStorage=true.")
	var variants string
	fs.StringVar(&variants, "ceiling-variants", "put,patch,patch-min,status,patch+status", "Write-ceiling variants measured against each other at the largest size, to attribute the controller's cost: put, patch (merge patch of the controller's shape), patch-min, smp-min, jsonpatch-min (the annotation alone, as merge, strategic merge or JSON patch), status (the status update alone, on a twin CRD), patch+status (both, per session in turn), status-schemaless, status-nocel, status-bare (the status update alone on twins whose pod template has no schema, which have no CEL rule, or both). Empty: none.")
	fs.StringVar(&c.compareBin, "compare-bin", "", "Another controller binary (say, built from the previous commit) to measure against this checkout's, fan-out by fan-out in the same run. Implies -fanout-only.")
	fs.StringVar(&c.pacedMaxRolling, "paced-max-rolling", "10%", "Budget (the profile annotation "+rollout.AnnotationMaxRolling+") of the paced rollout, measured once per size after the unpaced fan-outs, with a kube-controller-manager stand-in reporting moved Deployments complete. Empty: skip it.")
	fs.StringVar(&c.template, "template", "realistic", "Sessions' pod: realistic (spec.template of two containers, probes, 20 env vars, a preStop drain, scheduling; what game servers run with) or minimal (image, one port and requests, the short fields).")
	fs.Float64Var(&c.busyShare, "busy-share", 0.3, "Share of the largest profile's sessions that are busy (the "+gamesv1.BusyLabel+" label) when it is edited, turned idle one by one afterwards, measured once after the paced rollout. 0: skip it.")
	fs.DurationVar(&c.busyIdleOver, "busy-idle-over", 20*time.Second, "Span over which the busy sessions turn idle.")
	fs.IntVar(&c.tenants, "tenants", 0, "Tenant namespaces whose sessions share one profile of a platform namespace by ReferenceGrant, measured last (the grant CRD is installed then). 0: skip it.")
	fs.IntVar(&c.tenantSessions, "tenant-sessions", 1000, "Sessions of the tenants scenario, spread over its namespaces; at most the largest -sessions size, whose Deployments its ceiling rounds write.")
	fs.BoolVar(&c.live, "live", true, "Measure, once per size after the paced rollout, one edit of the profile delivered live ("+rollout.AnnotationDelivery+": "+string(rollout.DeliveryLive)+") against the restart delivery of the same edit, with one pod object per session, acknowledged by the benchmark, and a kube-controller-manager stand-in. Runs in -fanout-only mode too.")
	fs.BoolVar(&c.fanOutOnly, "fanout-only", false, "Measure only the fan-outs (with delay 0), the paced rollout (unless -paced-max-rolling is empty), the live delivery (unless -live=false) and the ceiling variants: for iterating on performance changes.")
	fs.BoolVar(&internalNoFilter, "internal-nofilter-informer", false, "Internal: run the no-filter informer memory baseline.")
	fs.StringVar(&internalKubeconfig, "internal-kubeconfig", "", "Internal: kubeconfig of the no-filter baseline.")
	if err := fs.Parse(args); err != nil {
		return c, false, "", err
	}
	if c.template != "realistic" && c.template != "minimal" {
		return c, false, "", fmt.Errorf("-template must be realistic or minimal, got %q", c.template)
	}
	preset, ok := presets[c.preset]
	if !ok {
		return c, false, "", fmt.Errorf("-preset must be quick or full, got %q", c.preset)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, value := range preset {
		if !set[name] {
			if err := fs.Set(name, value); err != nil {
				return c, false, "", err
			}
		}
	}
	if sizes == "" {
		sizes = preset["sessions"]
	}
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 10 {
			return c, false, "", fmt.Errorf("-sessions: want sizes of at least 10, got %q", s)
		}
		c.sizes = append(c.sizes, n)
	}
	if c.compareBin != "" {
		c.fanOutOnly = true
	}
	c.compareEnv, c.apiServerFlags = strings.Fields(compareEnv), strings.Fields(apiServerFlags)
	known := map[string]bool{ceilingPut: true, ceilingPatch: true, ceilingPatchMin: true, ceilingSMPMin: true,
		ceilingJSONPatchMin: true, ceilingStatus: true, ceilingPatchStatus: true,
		ceilingStatusSchemaless: true, ceilingStatusNoCEL: true, ceilingStatusBare: true}
	for _, v := range strings.Split(variants, ",") {
		if v = strings.TrimSpace(v); v != "" && !known[v] {
			return c, false, "", fmt.Errorf("-ceiling-variants: unknown variant %q", v)
		}
		if v = strings.TrimSpace(v); v != "" {
			c.variants = append(c.variants, v)
		}
	}
	if c.profiles < len(c.sizes) {
		c.profiles = len(c.sizes)
	}
	if c.tenants > 0 && (c.tenantSessions < c.tenants || c.tenantSessions > slices.Max(c.sizes)) {
		return c, false, "", fmt.Errorf("-tenant-sessions must be at least -tenants and at most the largest -sessions size (%d), got %d", slices.Max(c.sizes), c.tenantSessions)
	}
	if c.rounds < 1 || c.variantRounds < 1 || c.workers < 1 || c.burstEdits < 1 || c.idlePeriods < 1 {
		return c, false, "", fmt.Errorf("-rounds, -variant-rounds, -workers, -burst-edits and -idle-periods must be positive")
	}
	if c.out == "" {
		name := c.preset
		if set["sessions"] || set["profiles"] || set["unrelated"] || set["workers"] || set["qps"] || set["burst"] {
			name = "custom"
		}
		c.out = filepath.Join("docs", "bench", name+".md")
	}
	return c, internalNoFilter, internalKubeconfig, nil
}

func main() {
	cfg, noFilter, kubeconfig, err := parseFlags(os.Args[1:])
	if err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if noFilter {
		if err := runNoFilterInformer(kubeconfig, cfg.settle); err != nil {
			fmt.Fprintln(os.Stderr, "bench: no-filter baseline:", err)
			os.Exit(1)
		}
		return
	}
	// Ctrl-C cancels the run; the deferred clean-up still stops every
	// controller and the control plane.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

var benchStart = time.Now()

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(benchStart).Seconds(), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, cfg config) (err error) {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	workDir, err := os.MkdirTemp("", "gamesession-bench-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			logf("logs kept in %s", workDir)
			return
		}
		os.RemoveAll(workDir)
	}()
	e := &env{cfg: cfg, root: root, workDir: workDir, running: map[*ctlProc]struct{}{}}
	res := &results{cfg: cfg, machine: describeMachine(), command: commandLine(), defaultDelay: app.NewOptions().ProfileChangeDelay,
		phases: map[string]time.Duration{}}
	phase := func(name string, start time.Time) { res.phases[name] = time.Since(start) }

	t := time.Now()
	if !cfg.skipMicro && !cfg.fanOutOnly {
		logf("micro-benchmark: index versus scan")
		res.micro = runMicro(root)
		if res.micro.err != nil {
			logf("micro-benchmark failed: %v", res.micro.err)
		}
	}
	phase("micro-benchmark", t)

	t = time.Now()
	if e.controllerBin = cfg.controllerBin; e.controllerBin == "" {
		e.controllerBin = filepath.Join(workDir, "gamesession-controller")
		build := exec.Command(goBinary(), "build", "-o", e.controllerBin, "./cmd/gamesession-controller")
		build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building the controller: %w", err)
		}
	}
	// Registered before the start: a failure half-way through the set-up
	// must still stop whatever was started.
	defer func() {
		for p := range e.running {
			_ = e.stopController(p)
		}
		if e.stopTracker != nil {
			e.stopTracker()
		}
		if e.cp == nil {
			return
		}
		if stopErr := e.cp.Stop(); stopErr != nil && err == nil {
			err = stopErr
		}
	}()
	logf("starting the control plane (etcd, kube-apiserver; no kube-controller-manager, no nodes)")
	if err := e.startControlPlane(ctx); err != nil {
		return err
	}
	phase("control plane", t)

	// Watches with 10 sessions: a controller over the first ten sessions.
	t = time.Now()
	if err := e.createProfiles(ctx); err != nil {
		return err
	}
	if err := e.createHotSessions(ctx, 0, 0, 10); err != nil {
		return err
	}
	small, smallRes, err := e.coldStart(ctx, "ten-sessions")
	if err != nil {
		return err
	}
	res.watchesSmall = smallRes
	if err := e.stopController(small); err != nil {
		return err
	}

	logf("creating %d sessions over %d profiles", sum(cfg.sizes)+max(cfg.profiles-len(cfg.sizes), 0)*cfg.otherPerProfile, cfg.profiles)
	if err := e.createHotSessions(ctx, 0, 10, cfg.sizes[0]); err != nil {
		return err
	}
	for i := 1; i < len(e.hot); i++ {
		if err := e.createHotSessions(ctx, i, 0, e.hot[i].size); err != nil {
			return err
		}
	}
	if err := e.createOtherSessions(ctx); err != nil {
		return err
	}
	if res.initial, err = e.initialRollout(ctx); err != nil {
		return err
	}
	if err := e.copyToCeiling(ctx); err != nil {
		return err
	}
	phase("setup", t)

	if !cfg.fanOutOnly {
		t = time.Now()
		if err := e.coldIdleMemory(ctx, res); err != nil {
			return err
		}
		phase("cold start, idle, memory", t)
	}

	// Fan-out with the default --profile-change-delay, then with 0.
	t = time.Now()
	if !cfg.fanOutOnly {
		c, _, err := e.coldStart(ctx, "fan-out-default-delay")
		if err != nil {
			return err
		}
		if res.fanDefault, err = e.fanOutSeries(ctx, c, res.defaultDelay); err != nil {
			return err
		}
		if res.burstDefault, err = e.burst(ctx, c, e.hot[0], res.defaultDelay); err != nil {
			return err
		}
		if err := e.stopController(c); err != nil {
			return err
		}
	}
	if cfg.compareBin != "" {
		if res.compare, err = e.compareSeries(ctx); err != nil {
			return err
		}
	}
	d, _, err := e.coldStart(ctx, "fan-out-no-delay", "--profile-change-delay=0")
	if err != nil {
		return err
	}
	if res.fanZero, err = e.fanOutSeries(ctx, d, 0); err != nil {
		return err
	}
	if !cfg.fanOutOnly {
		if res.burstZero, err = e.burst(ctx, d, e.hot[0], 0); err != nil {
			return err
		}
	}
	if m, err := readMem(d.pid()); err == nil && d.cmd != nil {
		res.fanZeroPeak = m.HWM
		res.fanZeroSessions = sum(cfg.sizes) + max(cfg.profiles-len(cfg.sizes), 0)*cfg.otherPerProfile
	}
	if len(cfg.variants) > 0 {
		// The idle controller stays up, as in the paired ceiling rounds.
		if res.variants, err = e.ceilingVariants(ctx, e.hot[len(e.hot)-1].size); err != nil {
			return err
		}
		if cfg.profileDir != "" {
			if err := e.profileStatusWrites(ctx, e.hot[len(e.hot)-1].size); err != nil {
				return err
			}
		}
	}
	if err := e.stopController(d); err != nil {
		return err
	}
	phase("fan-out", t)

	if cfg.profileDir != "" {
		t = time.Now()
		r, err := e.profileFanOut(ctx, e.hot[len(e.hot)-1])
		if err != nil {
			return err
		}
		res.profiled = &r
		phase("profiling", t)
	}

	if cfg.pacedMaxRolling != "" {
		// After the unpaced fan-outs, which the kube-controller-manager
		// stand-in must not disturb: it runs only within this phase.
		t = time.Now()
		if res.pacedBaseline, res.paced, err = e.pacedSeries(ctx, cfg.pacedMaxRolling); err != nil {
			return err
		}
		phase("paced rollout", t)
	}

	if cfg.live {
		// After the paced rollout, and before the scenarios that need the
		// sessions as they were: it switches each profile back to restart
		// and deletes its pods and live profiles when done.
		t = time.Now()
		if res.live, err = e.liveSeries(ctx); err != nil {
			return err
		}
		phase("live delivery", t)
	}

	if !cfg.fanOutOnly && cfg.busyShare > 0 {
		t = time.Now()
		if res.busy, err = e.busyRollout(ctx, cfg.busyShare, cfg.busyIdleOver); err != nil {
			return err
		}
		phase("busy sessions", t)
	}

	if !cfg.fanOutOnly && cfg.tenants > 0 {
		t = time.Now()
		if res.tenants, err = e.tenantsSeries(ctx, cfg.tenants, cfg.tenantSessions); err != nil {
			return err
		}
		phase("tenants", t)
	}

	if !cfg.fanOutOnly {
		// Last, because it leaves a fan-out unfinished.
		t = time.Now()
		s, _, err := e.coldStart(ctx, "client-go-defaults", "--kube-api-qps=5", "--kube-api-burst=10", "--profile-change-delay=0")
		if err != nil {
			return err
		}
		if res.slow, err = e.slow(ctx, s, e.hot[0]); err != nil {
			return err
		}
		if err := e.stopController(s); err != nil {
			return err
		}
		phase("client-go defaults", t)
	}

	res.wall = time.Since(benchStart)
	report := res.markdown()
	fmt.Println(report)
	if cfg.out != "-" {
		path := cfg.out
		if !filepath.IsAbs(path) {
			path = filepath.Join(root, path)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
			return err
		}
		logf("results written to %s", path)
	}
	return nil
}

// coldIdleMemory measures a cold start, the watches and the memory, adds the
// unrelated ConfigMaps and measures a fresh process again, with the no-filter
// informer as the baseline of both, then the idle cost.
func (e *env) coldIdleMemory(ctx context.Context, res *results) error {
	b, cold, err := e.coldStart(ctx, "cold-start")
	if err != nil {
		return err
	}
	res.cold = cold
	if res.memBefore, err = e.controllerMemory(ctx, b); err != nil {
		return err
	}
	if res.noFilterBefore, err = e.noFilterMemory(ctx); err != nil {
		return err
	}
	logf("creating %d unrelated ConfigMaps of %d bytes", e.cfg.unrelated, e.cfg.unrelatedSize)
	if err := e.createNoise(ctx, e.cfg.unrelated, e.cfg.unrelatedSize); err != nil {
		return err
	}
	if res.memSameProcess, err = e.controllerMemory(ctx, b); err != nil {
		return err
	}
	if err := e.stopController(b); err != nil {
		return err
	}
	b2, coldNoise, err := e.coldStart(ctx, "cold-start-unrelated")
	if err != nil {
		return err
	}
	res.coldNoise = coldNoise
	if res.memAfter, err = e.controllerMemory(ctx, b2); err != nil {
		return err
	}
	if err := e.stopController(b2); err != nil {
		return err
	}
	if res.noFilterAfter, err = e.noFilterMemory(ctx); err != nil {
		return err
	}
	// Idle in a process of its own: its short resync period would otherwise
	// add garbage to the memory figures.
	idle, _, err := e.coldStart(ctx, "idle", "--resync-period="+e.cfg.resync.String())
	if err != nil {
		return err
	}
	if res.idle, err = e.idle(ctx, idle); err != nil {
		return err
	}
	return e.stopController(idle)
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// repoRoot finds the module root from the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "artifacts", "crd")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("run from inside the gamesession-controller repository")
		}
		dir = parent
	}
}

// commandLine is how this run was started, as a user would retype it.
func commandLine() string {
	args := make([]string, 0, len(os.Args))
	for _, a := range os.Args[1:] {
		if strings.ContainsAny(a, " \t\"'$") {
			a = strconv.Quote(a)
		}
		args = append(args, a)
	}
	return strings.TrimSpace("go run ./test/bench " + strings.Join(args, " "))
}
