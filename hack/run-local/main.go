package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	"github.com/example/gamesession-controller/internal/controlplane"
	"github.com/example/gamesession-controller/internal/livestandin"
	"github.com/example/gamesession-controller/internal/manifests"
)

func main() {
	opts := app.NewOptions()
	// Locally, serve metrics and health on loopback only.
	opts.MetricsBindAddress = "127.0.0.1:8080"
	opts.HealthProbeBindAddress = "127.0.0.1:8081"
	klog.InitFlags(nil)
	opts.AddFlags(flag.CommandLine)
	nodes := flag.Int("nodes", 3, "Fake kwok nodes to create.")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: %s [flags]\n\n"+
			"Runs the controller on a local control plane. The flags are the controller's\n"+
			"and run-local's own, e.g. make run ARGS='-v=2 --nodes=5'.\n\n", filepath.Base(os.Args[0]))
		flag.PrintDefaults()
	}
	flag.Parse()
	// flag.Parse stops at the first argument that is not a flag, or at "--":
	// refuse what it left rather than silently run without it.
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "run-local: unexpected arguments %q: pass flags only, e.g. -v=2 (no \"--\")\n", flag.Args())
		os.Exit(2)
	}
	// Checked here too, so that a bad flag fails at once, not after the
	// control plane has started.
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "run-local: %v\n", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, opts, *nodes); err != nil {
		fmt.Fprintf(os.Stderr, "run-local: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, opts *app.Options, nodes int) error {
	fmt.Println("Starting a local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)...")
	start := time.Now()
	// The control plane outlives ctx's cancellation until Stop, so Ctrl-C
	// during startup still tears down what was started.
	cp, err := controlplane.Start(ctx, controlplane.Options{Nodes: nodes, ControllerManager: true, Out: os.Stdout})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("Stopping the local control plane...")
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "run-local: stopping the control plane: %v\n", err)
		}
	}()
	fmt.Printf("Control plane ready in %s.\n", time.Since(start).Round(100*time.Millisecond))

	root, err := repoRoot()
	if err != nil {
		return err
	}
	cfg := cp.RESTConfig()
	if err := manifests.InstallCRDs(ctx, cfg, manifests.CRDPaths(root)...); err != nil {
		return err
	}
	applier, err := manifests.NewApplier(cfg)
	if err != nil {
		return err
	}
	examples, err := filepath.Glob(filepath.Join(root, "artifacts/examples/*.yaml"))
	if err != nil {
		return err
	}
	if err := applier.ApplyFiles(ctx, "default", examples...); err != nil {
		return err
	}

	fmt.Printf(`
The GameSession and ProfileRollout CRDs are installed and artifacts/examples are applied in namespace "default".
In another terminal:

    export KUBECONFIG=%s
    kubectl get gamesessions,deployments,pods
    kubectl edit configmap arena-standard      # change a value under data: and watch
    kubectl get deployments -w                 # every session of the profile rolls out

Live delivery (artifacts/examples/live-profile.yaml): kwok runs no game
servers, so this process acknowledges for them what their live profiles
hold, two seconds after it sees it, and refuses a file that says "broken"
(internal/livestandin):

    kubectl edit configmap lobby-live          # change a value under data:
    kubectl get gamesessions -w                # lobby-1, then lobby-2: DeliveryPending, then RevisionCurrent
    kubectl get pods -o custom-columns=NAME:.metadata.name,UID:.metadata.uid,ACK:.metadata.annotations.games\.example\.com/profile-ack
                                               # same pods, same UIDs, a new acknowledgment each

Metrics: http://%s/metrics   Health: http://%s/healthz
Press Ctrl-C to stop the controller and tear the control plane down.

`, cp.KubeconfigPath(), opts.MetricsBindAddress, opts.HealthProbeBindAddress)

	opts.RESTConfig = cfg
	if opts.LiveDelivery {
		standIn := livestandin.New(kubernetes.NewForConfigOrDie(cfg), livestandin.Options{Namespace: "default", Delay: 2 * time.Second,
			Answer: refuseBroken})
		go standIn.Run(ctx)
	}
	return app.Run(klog.NewContext(ctx, klog.Background()), opts)
}

// refuseBroken is how the stand-in game servers of make run answer a
// revision: they refuse one with "broken" in a file, as a game server
// refuses a value it cannot parse, so that a demo can halt a live rollout.
func refuseBroken(_, _ string, files map[string]string) (bool, error) {
	for name, content := range files {
		if strings.Contains(content, "broken") {
			return true, fmt.Errorf("%s: cannot parse %q", name, content)
		}
	}
	return true, nil
}

// repoRoot finds the repository from the working directory (make runs this
// from the root; a developer may run it from anywhere inside).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "artifacts/crd")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("run from inside the gamesession-controller repository")
		}
		dir = parent
	}
}
