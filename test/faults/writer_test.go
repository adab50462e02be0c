package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	writerAnnotation = "faults.example.com/writer"
	writerLabel      = "faults.example.com/pass"
	// wrongEvery: the other writer sets a wrong spec.replicas on one
	// Deployment in wrongEvery.
	wrongEvery = 20
)

// TestFaultOtherWriter has another writer edit the controller's Deployments
// all through a fan-out, in passes over every Deployment: an annotation and a
// label with its pass number, which the controller does not own and must
// leave alone, and on some a wrong spec.replicas, which the
// controller owns and must put back. At the end every Deployment carries the
// new hash, the session's replicas and the writer's last values, and rolled
// once: the writer's fields do not touch the pod template.
func TestFaultOtherWriter(t *testing.T) {
	t.Parallel() // leaves the control plane alone: see the package doc
	e := newEnv(t)
	n := e.size.sessions
	tracker := e.trackRollouts()
	p := e.startController("controller", e.slowFlags()...)
	e.waitReadyz(p)

	w := e.startOtherWriter()
	w.waitPass(1)
	hash := e.editProfile()
	tracker.waitCarrying(hash, n, e.size.converge)
	passes, wrong := w.stop()
	t.Logf("the other writer made %d passes over the %d Deployments, %d of them setting wrong replicas", passes, n, wrong)
	if passes < 3 {
		t.Errorf("the other writer made only %d passes: it did not write all through the fan-out", passes)
	}

	e.waitConverged("after the other writer stopped", hash)
	if state := p.ExitState(); state != "" {
		t.Fatalf("the controller exited: %s", state)
	}
	var lost []string
	deployments := e.deployments()
	for _, name := range e.names {
		d := deployments[name]
		if got := d.Annotations[writerAnnotation]; got != strconv.Itoa(passes) {
			lost = append(lost, fmt.Sprintf("%s: annotation %s=%q, want %d", name, writerAnnotation, got, passes))
		}
		if got := d.Labels[writerLabel]; got != passLabel(passes) {
			lost = append(lost, fmt.Sprintf("%s: label %s=%q, want %q", name, writerLabel, got, passLabel(passes)))
		}
	}
	report(t, lost, "fields of the other writer lost")
	// The writer's edits raise generations too, so only the ReplicaSets and
	// the hashes tell how often each Deployment rolled.
	e.checkReplicaSets()
	tracker.checkHashes(e.hashes, deployments)
}

// passLabel is the label value the other writer sets in a pass.
func passLabel(pass int) string { return "pass-" + strconv.Itoa(pass) }

// otherWriter patches every Deployment, pass after pass, until stopped.
type otherWriter struct {
	e      *env
	cancel context.CancelFunc
	done   chan struct{}
	pass   atomic.Int64 // passes completed
	wrong  atomic.Int64 // wrong replicas written
	stopAt atomic.Int64 // the last pass to make; 0 until stop
	err    atomic.Pointer[error]
}

func (e *env) startOtherWriter() *otherWriter {
	ctx, cancel := context.WithCancel(context.Background())
	w := &otherWriter{e: e, cancel: cancel, done: make(chan struct{})}
	e.t.Cleanup(func() {
		cancel()
		<-w.done
	})
	go func() {
		defer close(w.done)
		for pass := 1; ; pass++ {
			if err := w.writePass(ctx, pass); err != nil {
				if ctx.Err() == nil {
					w.err.Store(&err)
				}
				return
			}
			w.pass.Store(int64(pass))
			if last := w.stopAt.Load(); last != 0 && int64(pass) >= last {
				return
			}
		}
	}()
	return w
}

// writePass patches every Deployment once, 8 at a time.
func (w *otherWriter) writePass(ctx context.Context, pass int) error {
	work := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				name := w.e.names[i]
				edit := map[string]any{"metadata": map[string]any{
					"annotations": map[string]string{writerAnnotation: strconv.Itoa(pass)},
					"labels":      map[string]string{writerLabel: passLabel(pass)},
				}}
				if i%wrongEvery == wrongEvery/2 {
					edit["spec"] = map[string]any{"replicas": w.e.replicas[name] + 1}
					w.wrong.Add(1)
				}
				patch, _ := json.Marshal(edit)
				// A merge patch, like kubectl annotate or scale: no
				// resourceVersion, so no conflicts, and only these fields.
				if _, err := w.e.kube.AppsV1().Deployments(w.e.ns).Patch(ctx, name, types.MergePatchType, patch,
					metav1.PatchOptions{FieldManager: "faults-other-writer"}); err != nil {
					errs <- fmt.Errorf("pass %d, %s: %w", pass, name, err)
					return
				}
			}
		})
	}
	for i := range w.e.names {
		select {
		case work <- i:
		case err := <-errs:
			close(work)
			wg.Wait()
			return err
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// waitPass waits until the writer has completed pass.
func (w *otherWriter) waitPass(pass int) {
	w.e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for w.pass.Load() < int64(pass) {
		w.checkErr()
		if time.Now().After(deadline) {
			w.e.t.Fatalf("the other writer did not complete pass %d within a minute", pass)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop lets the writer make one more pass, begun after the call, and
// returns the number of the last pass and how many wrong replicas it wrote.
func (w *otherWriter) stop() (lastPass int, wrong int) {
	w.e.t.Helper()
	w.stopAt.Store(w.pass.Load() + 2) // the pass in progress, then a whole one
	select {
	case <-w.done:
	case <-time.After(2 * time.Minute):
		w.e.t.Fatal("the other writer did not finish its last pass within 2 minutes")
	}
	w.checkErr()
	return int(w.pass.Load()), int(w.wrong.Load())
}

func (w *otherWriter) checkErr() {
	w.e.t.Helper()
	if err := w.err.Load(); err != nil {
		w.e.t.Fatalf("the other writer failed: %v", *err)
	}
}
