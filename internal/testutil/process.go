package testutil

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ProbeTimeout bounds how long Probe waits for a process to answer at all.
const ProbeTimeout = 90 * time.Second

var build struct {
	once sync.Once
	path string
	err  error
}

// ControllerBinary builds cmd/gamesession-controller once per test binary,
// into dir (the control plane's directory, which is removed with it), and
// returns its path. Later calls return the first build, whatever their dir.
func ControllerBinary(t testing.TB, dir string) string {
	t.Helper()
	build.once.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			build.err = err
			return
		}
		build.path = filepath.Join(dir, "gamesession-controller")
		cmd := exec.Command("go", "build", "-o", build.path, "./cmd/gamesession-controller")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// moduleRoot is the directory of the main module's go.mod, as the go command
// sees it from the test's working directory (its package directory).
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// ControllerProcess is the controller binary running as a child process.
type ControllerProcess struct {
	// Name names the process in messages and its log file.
	Name string
	// LogPath is the file the process's output goes to.
	LogPath string
	// MetricsAddr and HealthAddr are the loopback host:port addresses it
	// serves /metrics and /healthz, /readyz on.
	MetricsAddr string
	HealthAddr  string

	t      testing.TB
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartController runs binary with args, serving metrics and probes on free
// loopback ports (args may not set those two flags). env adds to the process
// environment. The process is killed when the test ends; its log is printed
// if the test failed.
//
// A port found free can be taken by another process before the controller
// binds it (the tests of a package run in parallel, beside a control plane):
// a controller that exits on a port in use is started again on new ports,
// up to three times.
func StartController(t testing.TB, binary, name string, env []string, args ...string) *ControllerProcess {
	t.Helper()
	for attempt := 1; ; attempt++ {
		p := startController(t, binary, name, env, args...)
		if attempt == 3 || !p.lostItsPort() {
			return p
		}
		t.Logf("%s: a port taken before it could bind it; starting it again on others", name)
	}
}

// lostItsPort waits until the process serves both its ports, or exits, and
// reports whether it exited because a port was in use.
func (p *ControllerProcess) lostItsPort() bool {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		log, _ := os.ReadFile(p.LogPath)
		select {
		case <-p.exited:
			log, _ = os.ReadFile(p.LogPath)
			return strings.Contains(string(log), "address already in use")
		default:
		}
		if strings.Count(string(log), `"Serving"`) >= 2 {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func startController(t testing.TB, binary, name string, env []string, args ...string) *ControllerProcess {
	t.Helper()
	p := &ControllerProcess{
		t:           t,
		Name:        name,
		LogPath:     filepath.Join(t.TempDir(), name+".log"),
		MetricsAddr: FreeLoopbackAddr(t),
		HealthAddr:  FreeLoopbackAddr(t),
		exited:      make(chan struct{}),
	}
	logFile, err := os.Create(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{
		"--metrics-bind-address=" + p.MetricsAddr,
		"--health-probe-bind-address=" + p.HealthAddr,
	}, args...)
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = childProcAttr()
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			if b, err := os.ReadFile(p.LogPath); err == nil {
				t.Logf("log of %s:\n%s", name, b)
			}
		}
	})
	return p
}

// Kill sends SIGKILL, as a node failure or the OOM killer would: the process
// gets no chance to release its lease. It waits for the process to exit.
func (p *ControllerProcess) Kill() {
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.t.Errorf("%s did not exit within 10s of SIGKILL", p.Name)
	}
}

// Stop sends SIGTERM, as the kubelet does, and waits for the process to exit:
// the controller finishes its current syncs and releases its lease. After
// grace it is killed, and the test fails.
func (p *ControllerProcess) Stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.t.Errorf("%s did not exit within %s of SIGTERM; killing it", p.Name, grace)
		p.Kill()
	}
}

// Exited is closed once the process has exited.
func (p *ControllerProcess) Exited() <-chan struct{} { return p.exited }

// PID is the process ID.
func (p *ControllerProcess) PID() int { return p.cmd.Process.Pid }

// ExitState describes how the process ended; empty while it runs.
func (p *ControllerProcess) ExitState() string {
	select {
	case <-p.exited:
		return p.cmd.ProcessState.String()
	default:
		return ""
	}
}

// Log returns the process's output so far.
func (p *ControllerProcess) Log() string {
	p.t.Helper()
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		p.t.Fatal(err)
	}
	return string(b)
}

// LogLines returns the lines of the log that match re.
func (p *ControllerProcess) LogLines(re *regexp.Regexp) []string {
	p.t.Helper()
	var lines []string
	for line := range strings.Lines(p.Log()) {
		if re.MatchString(line) {
			lines = append(lines, strings.TrimRight(line, "\n"))
		}
	}
	return lines
}

var identityRE = regexp.MustCompile(`Waiting to become the leader.* identity="([^"]+)"`)

// Identity returns the leader election identity the process logged, or "".
func (p *ControllerProcess) Identity() string {
	p.t.Helper()
	m := identityRE.FindStringSubmatch(p.Log())
	if m == nil {
		return ""
	}
	return m[1]
}

// HTTPGet fetches http://addr/path; code 0 means no answer (not listening
// yet, or gone), with the error as body.
func HTTPGet(ctx context.Context, addr, path string) (code int, body string) {
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

// Probe waits until the process answers path on addr, and returns the answer.
func (p *ControllerProcess) Probe(ctx context.Context, addr, path string) (int, string) {
	p.t.Helper()
	deadline := time.Now().Add(ProbeTimeout)
	for {
		code, body := HTTPGet(ctx, addr, path)
		if code != 0 {
			return code, body
		}
		select {
		case <-p.exited:
			p.t.Fatalf("%s exited: %v", p.Name, p.cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s does not answer %s: %s", p.Name, path, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Readyz probes /readyz.
func (p *ControllerProcess) Readyz(ctx context.Context) (int, string) {
	return p.Probe(ctx, p.HealthAddr, "/readyz")
}

// Healthz probes /healthz.
func (p *ControllerProcess) Healthz(ctx context.Context) (int, string) {
	return p.Probe(ctx, p.HealthAddr, "/healthz")
}

// Metrics scrapes /metrics.
func (p *ControllerProcess) Metrics(ctx context.Context) PromText {
	p.t.Helper()
	code, body := p.Probe(ctx, p.MetricsAddr, "/metrics")
	if code != http.StatusOK {
		p.t.Fatalf("%s /metrics: %d %s", p.Name, code, body)
	}
	return PromText(body)
}

// FreeLoopbackAddr returns a 127.0.0.1 address with a port free right now.
func FreeLoopbackAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// WriteKubeconfig writes cfg (server, CA, bearer token) as a kubeconfig file
// for a controller process.
func WriteKubeconfig(t testing.TB, cfg *rest.Config) string {
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
