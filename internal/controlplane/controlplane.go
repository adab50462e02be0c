package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	// EnvBinDir overrides where the control plane binaries are looked up.
	EnvBinDir = "GAMESESSION_CONTROLPLANE_BIN"
	// EnvKeep, set to 1, keeps the temporary directory (logs, etcd data) of a
	// control plane that failed to start or whose tests failed.
	EnvKeep = "GAMESESSION_KEEP_CONTROLPLANE"

	// stopGrace is how long a component gets to exit after SIGTERM.
	stopGrace = 5 * time.Second
	// readyTimeout bounds each component's readiness wait.
	readyTimeout = 60 * time.Second
)

// Options configures Start.
type Options struct {
	// BinDir holds the binaries. Default: $GAMESESSION_CONTROLPLANE_BIN, else
	// <repo root>/bin/controlplane.
	BinDir string
	// Nodes is the number of kwok fake nodes to create. kube-scheduler and
	// kwok are only started when Nodes > 0, since without nodes they have
	// nothing to do.
	Nodes int
	// ControllerManager starts kube-controller-manager (garbage collector,
	// Deployment/ReplicaSet, namespace and service account controllers).
	// Without it the ServiceAccount and TaintNodesByCondition admission
	// plugins are disabled, so that pods are still admitted and scheduled.
	ControllerManager bool
	// ControllerManagerFlags are added to kube-controller-manager's flags,
	// after (so overriding) the ones Start sets: tests that roll out
	// thousands of Deployments raise its rate limit and parallelism.
	ControllerManagerFlags []string
	// APIServerFlags are added to kube-apiserver's flags, after the ones
	// Start sets: the benchmark turns on alpha feature gates with them.
	APIServerFlags []string
	// Out receives progress messages; nil discards them.
	Out io.Writer
}

// ControlPlane is a running control plane. Stop it when done.
type ControlPlane struct {
	dir        string
	out        io.Writer
	apiURL     string
	etcdURL    string
	caData     []byte
	caPinned   bool // caData is final: a restarted apiserver must serve it
	adminToken string
	kubeconfig string

	// etcd and apiserver are kept to restart them (restart.go): same
	// binary, flags, ports, data directory and certificates.
	etcd, apiserver component
	certDir         string

	// mu guards procs, which restarts replace in place, and closed.
	mu     sync.Mutex
	procs  []*process // in start order; stopped in reverse
	closed bool       // Stop has begun: no more restarts

	stopOnce sync.Once
	stopErr  error
}

// component is how to start one process again.
type component struct {
	name string
	bin  string
	args []string
}

// ErrBinariesMissing is returned (wrapped) by Start when a binary is absent.
var ErrBinariesMissing = errors.New("control plane binaries missing: run `make controlplane` (hack/build-controlplane.sh)")

// Start launches the control plane and returns once every started component
// is ready. On error everything already started is stopped again. ctx only
// bounds the start-up; the processes outlive it until Stop.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	begin := time.Now()
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	bins, err := findBinaries(opts)
	if err != nil {
		return nil, err
	}

	sweepStaleDirs()
	dir, err := newTempDir()
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{dir: dir, out: out}
	defer func() {
		if err != nil {
			keep := os.Getenv(EnvKeep) == "1"
			_ = cp.stop(keep)
			if keep {
				fmt.Fprintf(out, "controlplane: kept %s (%s=1)\n", dir, EnvKeep)
			}
		}
	}()

	files, err := writeAuthFiles(dir)
	if err != nil {
		return nil, err
	}
	cp.adminToken = files.adminToken
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]

	// etcd
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	cp.etcd = component{name: "etcd", bin: bins.etcd, args: []string{
		"--name=default",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		// Spelled out so etcd's localhost:2380 defaults never appear.
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		"--unsafe-no-fsync", // tests do not need durability; fsync dominates etcd latency
	}}
	cp.etcdURL = etcdURL
	etcd, err := cp.launch(cp.etcd.name, cp.etcd.bin, cp.etcd.args...)
	if err != nil {
		return nil, err
	}
	if err := cp.waitReady(ctx, etcd, cp.etcdReady); err != nil {
		return nil, err
	}

	// kube-apiserver
	cp.certDir = filepath.Join(dir, "apiserver-certs")
	apiArgs := []string{
		"--etcd-servers=" + etcdURL,
		"--cert-dir=" + cp.certDir,
		"--secure-port=" + fmt.Sprint(apiPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// The endpoint reconciler refuses loopback addresses, and nothing here
		// reaches the apiserver through the in-cluster "kubernetes" Service.
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		"--allow-privileged=true",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + files.saPublicKey,
		"--service-account-signing-key-file=" + files.saPrivateKey,
		"--token-auth-file=" + files.tokenFile,
	}
	if !opts.ControllerManager {
		// Both plugins rely on controllers in kube-controller-manager: the
		// service account controller creates the "default" ServiceAccount pods
		// need, and the node lifecycle controller lifts the not-ready taint
		// TaintNodesByCondition puts on every new node.
		apiArgs = append(apiArgs, "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition")
	}
	apiArgs = append(apiArgs, opts.APIServerFlags...)
	cp.apiserver = component{name: "kube-apiserver", bin: bins.apiserver, args: apiArgs}
	apiserver, err := cp.launch(cp.apiserver.name, cp.apiserver.bin, cp.apiserver.args...)
	if err != nil {
		return nil, err
	}
	cp.apiURL = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	if err := cp.waitReady(ctx, apiserver, cp.apiServerReady); err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, cp.caData, 0o644); err != nil {
		return nil, err
	}
	cp.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(cp.kubeconfig, cp.apiURL, cp.caData, cp.adminToken); err != nil {
		return nil, err
	}

	// The remaining components start together and are then awaited in turn;
	// their readiness times overlap, which keeps start-up short.
	var kcm, kwok *process
	if opts.ControllerManager {
		kcmArgs := []string{
			"--kubeconfig=" + cp.kubeconfig,
			"--leader-elect=false",
			"--controllers=*",
			"--secure-port=0",
			"--service-account-private-key-file=" + files.saPrivateKey,
			// Published to namespaces as kube-root-ca.crt.
			"--root-ca-file=" + caFile,
		}
		kcmArgs = append(kcmArgs, opts.ControllerManagerFlags...)
		kcm, err = cp.launch("kube-controller-manager", bins.controllerManager, kcmArgs...)
		if err != nil {
			return nil, err
		}
	}
	if opts.Nodes > 0 {
		if _, err := cp.launch("kube-scheduler", bins.scheduler,
			"--kubeconfig="+cp.kubeconfig,
			"--leader-elect=false",
			"--secure-port=0",
		); err != nil {
			return nil, err
		}
		if kwok, err = cp.launch("kwok", bins.kwok,
			"--kubeconfig="+cp.kubeconfig,
			"--manage-all-nodes=true",
			"--server-address=127.0.0.1:0",
			"--config="+bins.kwokStages,
		); err != nil {
			return nil, err
		}
	}
	if kcm != nil {
		// kube-controller-manager has no health endpoint with --secure-port=0;
		// the service account controller creating default/default shows that
		// it is connected and its controllers are running.
		if err := cp.waitReady(ctx, kcm, func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
			return err == nil, nil
		}); err != nil {
			return nil, err
		}
	}
	if kwok != nil {
		if err := CreateFakeNodes(ctx, client, opts.Nodes); err != nil {
			return nil, err
		}
		if err := cp.waitReady(ctx, kwok, func(ctx context.Context) (bool, error) {
			return nodesReady(ctx, client, opts.Nodes)
		}); err != nil {
			return nil, err
		}
		// The scheduler has no health endpoint with --secure-port=0; it must at
		// least still be running by now.
		if err := cp.checkRunning(); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(out, "controlplane: ready in %.1fs (%s, %s)\n", time.Since(begin).Seconds(), cp.apiURL, dir)
	return cp, nil
}

// Stop stops every process (SIGTERM, then SIGKILL after a grace period) in
// reverse start order and removes the temporary directory. It is idempotent
// and safe to call concurrently; all callers get the first call's result.
// The error also reports components that had exited unexpectedly before.
func (cp *ControlPlane) Stop() error { return cp.stop(false) }

func (cp *ControlPlane) stop(keepDir bool) error {
	cp.stopOnce.Do(func() {
		begin := time.Now()
		var errs []error
		// Held throughout, so that a restart in progress cannot launch a
		// process after its slot was stopped.
		cp.mu.Lock()
		defer cp.mu.Unlock()
		cp.closed = true
		for i := len(cp.procs) - 1; i >= 0; i-- {
			errs = append(errs, cp.procs[i].stop(stopGrace, cp.out))
		}
		fmt.Fprintf(cp.out, "controlplane: stopped in %.1fs\n", time.Since(begin).Seconds())
		if keepDir {
			_ = os.WriteFile(filepath.Join(cp.dir, keepMarker), nil, 0o644)
		} else if err := os.RemoveAll(cp.dir); err != nil {
			errs = append(errs, err)
		}
		cp.stopErr = errors.Join(errs...)
	})
	return cp.stopErr
}

// RESTConfig returns a fresh admin (system:masters) config. QPS and Burst are
// left zero, i.e. client-go's defaults; callers pick their own rate limits.
func (cp *ControlPlane) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            cp.apiURL,
		BearerToken:     cp.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), cp.caData...)},
	}
}

// KubeconfigPath is an admin kubeconfig usable by kubectl.
func (cp *ControlPlane) KubeconfigPath() string { return cp.kubeconfig }

// Dir is the temporary directory holding logs, certificates and etcd data.
func (cp *ControlPlane) Dir() string { return cp.dir }

// APIServerURL is the apiserver's https URL on 127.0.0.1.
func (cp *ControlPlane) APIServerURL() string { return cp.apiURL }

// APIServerMetrics returns the apiserver's /metrics text (Prometheus format).
func (cp *ControlPlane) APIServerMetrics(ctx context.Context) (string, error) {
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return "", err
	}
	body, err := client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	return string(body), err
}

// ServiceAccountConfig returns a config authenticating as the existing
// ServiceAccount namespace/name, with a twelve-hour token from the
// TokenRequest API. It carries only what RBAC grants that account. The
// token outlives the longest run that uses it: the full benchmark takes
// over an hour, and an expired token would leave its controller
// Unauthorized midway.
func (cp *ControlPlane) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return nil, err
	}
	expiry := int64(12 * 3600)
	tr, err := client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for service account %s/%s: %w", namespace, name, err)
	}
	cfg := cp.RESTConfig()
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}
