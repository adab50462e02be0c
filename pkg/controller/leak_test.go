package controller

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// withGoroutineLabel runs f with a pprof label that every goroutine f starts,
// and every goroutine those start, inherits. Goroutines of tests running in
// parallel carry no such label, so counting the labelled ones after f returns
// finds exactly what f left running.
func withGoroutineLabel(ctx context.Context, t *testing.T, f func(ctx context.Context)) {
	t.Helper()
	label := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	pprof.Do(ctx, pprof.Labels("leakcheck", label), f)
	expectNoGoroutinesLabelled(t, label)
}

// expectNoGoroutinesLabelled waits for the goroutines carrying the label to
// end, and fails the test with their stacks if some do not.
func expectNoGoroutinesLabelled(t *testing.T, label string) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if left = goroutinesLabelled(label); len(left) == 0 {
			return
		}
	}
	t.Errorf("%d goroutine stack(s) still running after the controller stopped:\n%s", len(left), strings.Join(left, "\n\n"))
}

// goroutinesLabelled returns the stacks, as the goroutine profile prints them,
// of the goroutines with the leakcheck label.
func goroutinesLabelled(label string) []string {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	var found []string
	for _, stack := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(stack, fmt.Sprintf("%q:%q", "leakcheck", label)) {
			found = append(found, stack)
		}
	}
	return found
}
