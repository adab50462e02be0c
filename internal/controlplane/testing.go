package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// RunTestMain is a whole TestMain: it starts one control plane for the test
// binary, hands it to set, runs the tests, stops the control plane and exits.
// The control plane is also stopped when the tests panic in TestMain's
// goroutine or the binary gets SIGINT/SIGTERM; if the binary is killed
// outright, Pdeathsig (Linux) takes the components down with it.
//
// Missing binaries are a hard failure, never a skip: tests that silently do
// not run are worse than a red build. Progress goes to stderr unless
// opts.Out is set.
func RunTestMain(m *testing.M, opts Options, set func(*ControlPlane)) {
	os.Exit(runTestMain(m, opts, set))
}

func runTestMain(m *testing.M, opts Options, set func(*ControlPlane)) (code int) {
	if opts.Out == nil {
		opts.Out = os.Stderr
	}
	keepOnFailure := os.Getenv(EnvKeep) == "1"

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var running atomic.Pointer[ControlPlane]
	interrupted := func(cp *ControlPlane, why error) {
		fmt.Fprintf(os.Stderr, "controlplane: %v: stopping the control plane\n", why)
		if err := cp.stop(keepOnFailure); err != nil {
			fmt.Fprintf(os.Stderr, "controlplane: %v\n", err)
		}
		if keepOnFailure {
			fmt.Fprintf(os.Stderr, "controlplane: kept %s\n", cp.Dir())
		}
		os.Exit(1)
	}
	go func() {
		sig := <-sigs
		cancel(fmt.Errorf("received %v", sig)) // aborts a Start in progress
		if cp := running.Load(); cp != nil {
			interrupted(cp, context.Cause(ctx))
		}
	}()

	cp, err := Start(ctx, opts)
	if err != nil {
		if errors.Is(err, ErrBinariesMissing) {
			fmt.Fprintf(os.Stderr, "%s\n%s\n%v\n%s\n", banner,
				"FATAL: the local Kubernetes control plane is not built. Run:  make controlplane", err, banner)
		} else {
			fmt.Fprintf(os.Stderr, "FATAL: starting the control plane: %v\n", err)
		}
		return 1
	}
	running.Store(cp)
	// A signal that raced with the end of Start found nothing to stop.
	if ctx.Err() != nil {
		interrupted(cp, context.Cause(ctx))
	}

	code = 1 // what a panic out of m.Run leaves behind
	defer func() {
		keep := code != 0 && keepOnFailure
		if err := cp.stop(keep); err != nil {
			fmt.Fprintf(os.Stderr, "controlplane: stop: %v\n", err)
			code = 1
		}
		if keep {
			fmt.Fprintf(os.Stderr, "controlplane: kept %s (%s=1)\n", cp.Dir(), EnvKeep)
		}
	}()
	set(cp)
	return m.Run()
}

const banner = "================================================================================"

// CreateNamespace creates a namespace named after the test (plus a random
// suffix) and deletes it when the test ends.
func CreateNamespace(t testing.TB, client kubernetes.Interface) string {
	t.Helper()
	ns, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: namespacePrefix(t.Name())},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		// t.Context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", ns.Name, err)
		}
	})
	return ns.Name
}

// namespacePrefix turns a test name into a DNS label prefix, leaving room
// for the 5-character random suffix of generateName.
func namespacePrefix(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	p := b.String()
	if len(p) > 40 {
		p = p[:40]
	}
	p = strings.Trim(p, "-")
	if p == "" {
		p = "test"
	}
	return p + "-"
}
