//go:build linux

package image_test

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/example/gamesession-controller/internal/controlplane"
	"github.com/example/gamesession-controller/internal/manifests"
	"github.com/example/gamesession-controller/internal/testutil"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
)

// nonroot is the image's user and group.
const nonroot = 65532

// waitTimeout bounds each wait on the controller or the cluster. The
// controller is ready about a second after it starts and syncs a session in
// well under one; this is for CI sharing two cores with the control plane.
const waitTimeout = 90 * time.Second

// TestEntrypointHelp runs the image's entrypoint with --help as the image's
// user in its own filesystem: a static binary that needs nothing else.
func TestEntrypointHelp(t *testing.T) {
	rootfs := unpackHostImage(t)
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	output, err := chrootCommand(ctx, rootfs, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("/gamesession-controller --help in the image, as %d:%d: %v\n%s", nonroot, nonroot, err, output)
	}
	for _, flag := range []string{"kubeconfig", "rollout-max-rolling", "leader-elect", "health-probe-bind-address"} {
		// The flag package lists each flag on a line of its own: "  -name" and its type, if not a bool.
		if !regexp.MustCompile(`(?m)^  -` + flag + `( |$)`).Match(output) {
			t.Errorf("--help does not list --%s:\n%s", flag, output)
		}
	}

	// The binary knows the version the image's label names.
	output, err = chrootCommand(ctx, rootfs, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("/gamesession-controller --version: %v\n%s", err, output)
	}
	l := imageLayout(t)
	label := l.images[hostPlatform()].config.Config.Labels["org.opencontainers.image.version"]
	if got, want := strings.TrimSpace(string(output)), "gamesession-controller "+label; got != want {
		t.Errorf("--version printed %q, want %q (the version label)", got, want)
	}
}

// TestEntrypointRunsController runs the image's entrypoint as the image's
// user in its own filesystem against the control plane, and has it roll a
// session out when its profile changes: the binary, its user and the files
// it has are enough for the controller's work.
func TestEntrypointRunsController(t *testing.T) {
	rootfs := unpackHostImage(t)
	ctx := t.Context()
	if err := manifests.InstallCRDs(ctx, cp.RESTConfig(), manifests.CRDPaths(repoRoot())...); err != nil {
		t.Fatalf("installing the GameSession CRD: %v", err)
	}
	kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	games := clientset.NewForConfigOrDie(cp.RESTConfig())
	ns := controlplane.CreateNamespace(t, kube)

	// The kubeconfig (CA and token inline) goes where a pod would mount it,
	// readable by the image's user only.
	kubeconfig, err := os.ReadFile(cp.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	writeOwned(t, filepath.Join(rootfs, "tmp", "kubeconfig"), kubeconfig)

	healthAddr := testutil.FreeLoopbackAddr(t)
	proc := startChrooted(t, rootfs,
		"--kubeconfig=/tmp/kubeconfig",
		"--leader-elect=false",
		"--namespace="+ns,
		"--metrics-bind-address="+testutil.FreeLoopbackAddr(t),
		"--health-probe-bind-address="+healthAddr,
		"-v=2",
	)

	begin := time.Now()
	proc.eventually(t, "/readyz to answer 200", func() (bool, error) {
		code, body := testutil.HTTPGet(ctx, healthAddr, "/readyz")
		return code == http.StatusOK, fmt.Errorf("%d %s", code, body)
	})
	t.Logf("the controller was ready %.1fs after it started", time.Since(begin).Seconds())
	checkConfined(t, proc.cmd.Process.Pid, rootfs)

	profile, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "classic",
			Labels: map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue},
		},
		Data: map[string]string{"game.properties": "mode=classic\nmaxPlayers=16\n"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = games.GamesV1().GameSessions(ns).Create(ctx, testutil.GameSession("arena", profile.Name), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	begin = time.Now()
	waitForRevision(t, proc, kube, ns, "arena", profile)
	t.Logf("the Deployment ran the profile %.1fs after the session was created", time.Since(begin).Seconds())

	profile.Data["game.properties"] = "mode=classic\nmaxPlayers=32\n"
	profile, err = kube.CoreV1().ConfigMaps(ns).Update(ctx, profile, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	begin = time.Now()
	waitForRevision(t, proc, kube, ns, "arena", profile)
	t.Logf("the Deployment rolled to the edited profile %.1fs after the edit", time.Since(begin).Seconds())

	// Stopping as the kubelet does, it exits cleanly.
	if err := proc.stop(30 * time.Second); err != nil {
		t.Error(err)
	}
}

// checkConfined checks, from /proc, that the process runs as the image's
// user with the unpacked image as its root.
func checkConfined(t *testing.T, pid int, rootfs string) {
	t.Helper()
	root, err := os.Readlink(fmt.Sprintf("/proc/%d/root", pid))
	if err != nil || root != rootfs {
		t.Errorf("the controller's root is %q (%v), want %s", root, err, rootfs)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{} // "Uid" -> "65532 65532 65532 65532" (real, effective, saved, filesystem)
	for line := range strings.Lines(string(status)) {
		if key, value, ok := strings.Cut(line, ":"); ok {
			ids[key] = strings.Join(strings.Fields(value), " ")
		}
	}
	for key, want := range map[string]string{"Uid": "65532 65532 65532 65532", "Gid": "65532 65532 65532 65532", "Groups": ""} {
		if ids[key] != want {
			t.Errorf("the controller's %s are %q, want %q", key, ids[key], want)
		}
	}
}

// waitForRevision waits until the session's Deployment runs the profile's
// current content: its pod template carries the content's hash and mounts the
// revision of that hash.
func waitForRevision(t *testing.T, proc *chrootProcess, kube kubernetes.Interface, ns, session string, profile *corev1.ConfigMap) {
	t.Helper()
	hash := controller.ProfileHash(profile)
	revision := controller.RevisionName(profile.Name, hash)
	proc.eventually(t, fmt.Sprintf("Deployment %s to run revision %s", session, revision), func() (bool, error) {
		d, err := kube.AppsV1().Deployments(ns).Get(t.Context(), session, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got := d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
		var mounted []string
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.ConfigMap != nil {
				mounted = append(mounted, v.ConfigMap.Name)
			}
		}
		return got == hash && len(mounted) == 1 && mounted[0] == revision,
			fmt.Errorf("hash annotation %q, mounts %v", got, mounted)
	})
}

// unpackHostImage unpacks the image of this host's platform into a fresh
// directory, as a container runtime would: owners, modes and all.
func unpackHostImage(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test runs the image's entrypoint in a chroot as %d:%d, which needs root (CAP_SYS_CHROOT, CAP_SETUID, CAP_CHOWN); run it as root", nonroot, nonroot)
	}
	l := imageLayout(t)
	img, ok := l.images[hostPlatform()]
	if !ok {
		t.Fatalf("the image has no %s variant to run here", hostPlatform())
	}
	rootfs := t.TempDir()
	err := l.readLayers(img, func(f layerFile) error {
		return unpackEntry(rootfs, f)
	})
	if err != nil {
		t.Fatalf("unpacking the %s image: %v", img.platform, err)
	}
	// The image's root is 0755 like any root directory; t.TempDir made it 0700.
	if err := os.Chmod(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	return rootfs
}

// unpackEntry writes one layer entry under rootfs. The image is one layer, so
// whiteouts are refused rather than applied.
func unpackEntry(rootfs string, f layerFile) error {
	name := path.Clean(f.hdr.Name)
	if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
		return fmt.Errorf("entry %q escapes the root", f.hdr.Name)
	}
	if strings.HasPrefix(path.Base(name), ".wh.") {
		return fmt.Errorf("whiteout %s in a single-layer image", name)
	}
	dest := filepath.Join(rootfs, filepath.FromSlash(name))
	switch f.hdr.Typeflag {
	case tar.TypeDir:
		if err := os.MkdirAll(dest, 0o700); err != nil {
			return err
		}
	case tar.TypeReg:
		if err := os.WriteFile(dest, f.data, 0o600); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s: tar type %q, want only files and directories", name, f.hdr.Typeflag)
	}
	// Owner first: chown clears setuid and setgid bits. The mode then
	// includes sticky, which MkdirAll would have lost to the umask.
	if err := os.Lchown(dest, f.hdr.Uid, f.hdr.Gid); err != nil {
		return err
	}
	return os.Chmod(dest, f.hdr.FileInfo().Mode())
}

// writeOwned writes a file of the image's user, mode 0600.
func writeOwned(t *testing.T, file string, data []byte) {
	t.Helper()
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(file, nonroot, nonroot); err != nil {
		t.Fatal(err)
	}
}

// chrootCommand runs the image's entrypoint inside rootfs as its user, as a
// container runtime would (without namespaces, which the test does not
// need). The kernel kills it if the test binary dies.
func chrootCommand(ctx context.Context, rootfs string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "/gamesession-controller", args...)
	cmd.Dir = "/"
	// Only what a container would have: no variable of the test's.
	cmd.Env = []string{"HOME=/home/nonroot"}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     rootfs,
		Credential: &syscall.Credential{Uid: nonroot, Gid: nonroot, Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
	}
	return cmd
}

// stopTreeOnCancel puts cmd in a process group of its own and has its
// cancellation kill the group: the build script's go commands with it.
func stopTreeOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// Lets Wait return even if a killed grandchild's pipe lingers.
	cmd.WaitDelay = 10 * time.Second
}

// chrootProcess is the image's entrypoint running in the background.
type chrootProcess struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait returned
}

// startChrooted starts the entrypoint with args. It is killed when the test
// ends, if still running; its log is printed if the test failed.
func startChrooted(t *testing.T, rootfs string, args ...string) *chrootProcess {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "controller.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child has its own descriptor
	p := &chrootProcess{cmd: chrootCommand(context.Background(), rootfs, args...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting /gamesession-controller in %s: %v", rootfs, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("the controller did not exit within 10s of SIGKILL")
		}
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("log of the controller:\n%s", b)
			}
		}
	})
	return p
}

// eventually polls cond until it holds, failing the test after waitTimeout
// or as soon as the process exits.
func (p *chrootProcess) eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		select {
		case <-p.exited:
			return false, fmt.Errorf("the controller exited: %v", p.cmd.ProcessState)
		default:
		}
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last: %v)", what, err, last)
	}
}

// stop sends SIGTERM, as the kubelet does, and reports a process that did not
// exit with status 0 within grace.
func (p *chrootProcess) stop(grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		return fmt.Errorf("the controller did not exit within %s of SIGTERM", grace)
	}
	if !p.cmd.ProcessState.Success() {
		return errors.New("the controller exited with " + p.cmd.ProcessState.String() + " after SIGTERM")
	}
	return nil
}
