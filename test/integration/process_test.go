package integration

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// controllerBinary builds cmd/gamesession-controller once per test binary,
// into the control plane's directory, which is removed with it.
func controllerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binary = filepath.Join(cp.Dir(), "gamesession-controller")
		cmd := exec.Command("go", "build", "-o", binary, "./cmd/gamesession-controller")
		cmd.Dir = "../.."
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// controllerProcess is the controller binary running as a child process.
type controllerProcess struct {
	t           *testing.T
	name        string
	cmd         *exec.Cmd
	log         string
	metricsAddr string
	healthAddr  string
	exited      chan struct{}
}

// startControllerProcess runs the binary with the given kubeconfig, scoped to
// the test's namespace and serving metrics and probes on free loopback ports.
// env adds to the process environment. The process is killed when the test
// ends; its log is printed if the test failed.
func (e *env) startControllerProcess(name, kubeconfig string, env []string, args ...string) *controllerProcess {
	e.t.Helper()
	p := &controllerProcess{
		t:           e.t,
		name:        name,
		log:         filepath.Join(e.t.TempDir(), name+".log"),
		metricsAddr: freeLoopbackAddr(e.t),
		healthAddr:  freeLoopbackAddr(e.t),
		exited:      make(chan struct{}),
	}
	logFile, err := os.Create(p.log)
	if err != nil {
		e.t.Fatal(err)
	}
	args = append([]string{
		"--kubeconfig=" + kubeconfig,
		"--namespace=" + e.ns,
		"--metrics-bind-address=" + p.metricsAddr,
		"--health-probe-bind-address=" + p.healthAddr,
		"--profile-change-delay=0",
		"--workers=4",
		"-v=2",
	}, args...)
	p.cmd = exec.Command(controllerBinary(e.t), args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = childProcAttr()
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		e.t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	e.t.Cleanup(func() {
		p.kill()
		if e.t.Failed() {
			if b, err := os.ReadFile(p.log); err == nil {
				e.t.Logf("log of %s:\n%s", name, b)
			}
		}
	})
	return p
}

// kill sends SIGKILL, as a node failure or the OOM killer would: the process
// gets no chance to release its lease. It waits for the process to exit.
func (p *controllerProcess) kill() {
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.t.Errorf("%s did not exit within 10s of SIGKILL", p.name)
	}
}

// identity returns the leader election identity the process logged.
func (p *controllerProcess) identity() string {
	p.t.Helper()
	b, err := os.ReadFile(p.log)
	if err != nil {
		p.t.Fatal(err)
	}
	m := regexp.MustCompile(`Waiting to become the leader.* identity="([^"]+)"`).FindSubmatch(b)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// get fetches http://addr/path; code 0 means no answer (not listening yet).
func httpGet(ctx context.Context, addr, path string) (code int, body string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// probe waits until the process answers path, and returns the answer.
func (p *controllerProcess) probe(ctx context.Context, addr, path string) (int, string) {
	p.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		code, body := httpGet(ctx, addr, path)
		if code != 0 {
			return code, body
		}
		select {
		case <-p.exited:
			p.t.Fatalf("%s exited: %v", p.name, p.cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s does not answer %s: %s", p.name, path, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *controllerProcess) readyz(ctx context.Context) (int, string) {
	return p.probe(ctx, p.healthAddr, "/readyz")
}

func (p *controllerProcess) healthz(ctx context.Context) (int, string) {
	return p.probe(ctx, p.healthAddr, "/healthz")
}

// metrics scrapes /metrics.
func (p *controllerProcess) metrics(ctx context.Context) promText {
	p.t.Helper()
	code, body := p.probe(ctx, p.metricsAddr, "/metrics")
	if code != http.StatusOK {
		p.t.Fatalf("%s /metrics: %d %s", p.name, code, body)
	}
	return promText(body)
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port free right now.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// writeKubeconfig writes cfg (server, CA, bearer token) as a kubeconfig file
// for a controller process.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// promText is a Prometheus text exposition.
type promText string

// sum adds up the samples of the metric (exact name, e.g.
// "workqueue_adds_total" or "..._count") whose labels include every pair in
// labels, and reports whether there was any.
func (m promText) sum(name string, labels map[string]string) (float64, bool) {
	total, found := 0.0, false
	for _, line := range strings.Split(string(m), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := cutLast(line, " ")
		if !ok {
			continue
		}
		metric, labelText, _ := strings.Cut(series, "{")
		if metric != name || !hasLabels(strings.TrimSuffix(labelText, "}"), labels) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		total += v
		found = true
	}
	return total, found
}

// series formats a metric and labels as Prometheus writes them, for messages.
func series(name string, labels map[string]string) string {
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		pairs = append(pairs, fmt.Sprintf("%s=%q", k, labels[k]))
	}
	if len(pairs) == 0 {
		return name
	}
	return name + "{" + strings.Join(pairs, ",") + "}"
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// hasLabels reports whether the label text (`a="x",b="y"`) has every pair.
// Values here never contain quotes or commas, which keeps this simple.
func hasLabels(text string, want map[string]string) bool {
	have := map[string]string{}
	for _, pair := range strings.Split(text, ",") {
		if k, v, ok := strings.Cut(pair, "="); ok {
			have[k] = strings.Trim(v, `"`)
		}
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
