package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
)

// Fault injection: tests stop kube-apiserver and restart etcd under a running
// controller. A component comes back exactly as it was started (binary, flags,
// port, etcd data directory, apiserver certificates), so every client keeps
// working with the configuration it already has.
//
// Both close their listeners at once on SIGTERM, so clients see them gone at
// once; but both then wait for their clients' long-running watches to end,
// which the other components hold open, and are usually killed after the
// grace period (5s).

// restartReadyTimeout bounds the readiness wait of a restarted component. A
// restart lands amid clients that all reconnect and relist at once: a
// kube-apiserver restarted under a fan-out of 300 sessions took 34s to be
// ready on 2 busy cores, against 5s at a quiet first start.
const restartReadyTimeout = 2 * readyTimeout

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after a grace
// period) and returns once it has exited. Until StartAPIServer, every request
// to its port is refused; the other components keep running and retry.
func (cp *ControlPlane) StopAPIServer() error {
	return cp.stopComponent(cp.apiserver.name)
}

// StartAPIServer starts kube-apiserver again, on the same port with the same
// flags and serving certificate, and returns once its /readyz says ok.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	p, err := cp.restart(cp.apiserver)
	if err != nil {
		return err
	}
	return cp.waitReadySince(ctx, p, p.started, restartReadyTimeout, cp.apiServerReady)
}

// RestartEtcd stops etcd and starts it again on its data directory, then
// waits for etcd to be healthy and for kube-apiserver, whose etcd client
// reconnects by itself, to be ready again. Nothing written before is lost:
// even with --unsafe-no-fsync the data reaches the page cache, which survives
// the process.
func (cp *ControlPlane) RestartEtcd(ctx context.Context) error {
	if err := cp.stopComponent(cp.etcd.name); err != nil {
		return err
	}
	down := time.Now()
	p, err := cp.restart(cp.etcd)
	if err != nil {
		return err
	}
	if err := cp.waitReadySince(ctx, p, p.started, restartReadyTimeout, cp.etcdReady); err != nil {
		return err
	}
	api := cp.running(cp.apiserver.name)
	if api == nil {
		return nil // stopped by the caller; StartAPIServer waits for it
	}
	return cp.waitReadySince(ctx, api, down, restartReadyTimeout, cp.apiServerReady)
}

// stopComponent stops the named process. It fails if the process had exited
// before anyone asked it to.
func (cp *ControlPlane) stopComponent(name string) error {
	cp.mu.Lock()
	p := cp.find(name)
	cp.mu.Unlock()
	if p == nil {
		return fmt.Errorf("controlplane: no %s to stop", name)
	}
	return p.stop(stopGrace, cp.out)
}

// restart starts c again in the place of its process, which must have been
// stopped by stopComponent.
func (cp *ControlPlane) restart(c component) (*process, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.closed {
		return nil, errors.New("controlplane: stopped, cannot restart " + c.name)
	}
	old := cp.find(c.name)
	if old == nil {
		return nil, fmt.Errorf("controlplane: %s was never started", c.name)
	}
	old.mu.Lock()
	stopping := old.stopping
	old.mu.Unlock()
	select {
	case <-old.done:
	default:
		return nil, fmt.Errorf("controlplane: %s is still running", c.name)
	}
	if !stopping {
		return nil, old.failure(fmt.Sprintf("exited unexpectedly (%v)", old.waitErr))
	}
	p, err := cp.startProcess(c.name, c.bin, c.args)
	if err != nil {
		return nil, err
	}
	// The same slot, so that Stop still stops components in start order.
	for i := range cp.procs {
		if cp.procs[i] == old {
			cp.procs[i] = p
		}
	}
	return p, nil
}

// find returns the named process; cp.mu must be held.
func (cp *ControlPlane) find(name string) *process {
	for _, p := range cp.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

// running returns the named process unless it has exited.
func (cp *ControlPlane) running(name string) *process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	p := cp.find(name)
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
		return p
	}
}

func (cp *ControlPlane) etcdReady(ctx context.Context) (bool, error) {
	return etcdHealthy(ctx, cp.etcdURL)
}

// apiServerReady reports whether kube-apiserver answers /readyz with "ok".
//
// The apiserver self-signs its serving certificate at its first start and
// reuses it from --cert-dir when restarted. During Start the CA is re-read
// until /readyz answers, in case the file was caught half-written; after
// that, clients trust that CA, so a restarted apiserver must still serve it.
func (cp *ControlPlane) apiServerReady(ctx context.Context) (bool, error) {
	ca, ok := readServingCA(filepath.Join(cp.certDir, "apiserver.crt"))
	if !ok {
		return false, nil
	}
	if cp.caPinned && !bytes.Equal(ca, cp.caData) {
		return false, errors.New("the serving certificate changed: clients of the first start no longer trust it")
	}
	if !cp.caPinned {
		cp.caData = ca
	}
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return false, err
	}
	body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil || string(body) != "ok" {
		return false, nil
	}
	// Written once, before Start returns; restarts only read it.
	if !cp.caPinned {
		cp.caPinned = true
	}
	return true, nil
}
