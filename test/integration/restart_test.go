package integration

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	"github.com/example/gamesession-controller/pkg/controller"
)

// Scenario 11: a burst of 20 profile edits within a second rolls each session
// a few times at most, not 20: the profile change delay lets the burst
// settle, and the work queue holds each session once however often it is added.
func TestProfileEditBurstCoalesces(t *testing.T) {
	e := newEnv(t)
	e.createProfile("bursty", map[string]string{"rev": "0"}, true)
	const sessions, edits = 5, 20
	c := e.startController(func(o *app.Options) { o.ProfileChangeDelay = app.NewOptions().ProfileChangeDelay })
	for i := range sessions {
		e.createSession(newSession(fmt.Sprintf("burst-%d", i), "bursty", 1))
	}
	for i := range sessions {
		e.waitForReady(fmt.Sprintf("burst-%d", i))
	}
	updatesBefore := make([]int, sessions)
	for i := range sessions {
		updatesBefore[i] = c.requests.count(fmt.Sprintf("update deployments burst-%d", i))
	}

	start := time.Now()
	var last *corev1.ConfigMap
	for i := 1; i <= edits; i++ {
		last = e.updateProfile("bursty", func(cm *corev1.ConfigMap) { cm.Data["rev"] = fmt.Sprint(i) })
		time.Sleep(40 * time.Millisecond)
	}
	// Edits within one delay join one rollout, so a burst rolls a session at
	// most once per delay it spans, plus the one started by its last edits.
	// On a loaded machine the 20 edits take longer than the intended second.
	took := time.Since(start)
	delay := app.NewOptions().ProfileChangeDelay
	maxWrites := int(took/delay) + 2
	hash := controller.ProfileHash(last)
	for i := range sessions {
		e.waitForDeploymentHash(fmt.Sprintf("burst-%d", i), hash)
	}
	for i := range sessions {
		writes := c.requests.count(fmt.Sprintf("update deployments burst-%d", i)) - updatesBefore[i]
		t.Logf("session burst-%d: %d Deployment writes for %d profile edits in %s", i, writes, edits, took)
		if writes < 1 || writes > maxWrites {
			t.Errorf("session burst-%d: %d Deployment writes for %d edits in %s, want 1 to %d", i, writes, edits, took, maxWrites)
		}
	}
}

// Scenario 12: a controller restarted with everything already in sync
// writes nothing at all: no Deployment, status or Event.
func TestRestartInSyncWritesNothing(t *testing.T) {
	e := newEnv(t)
	e.createProfile("arena", map[string]string{"k": "v"}, true)
	first := e.startController()
	for i := range 10 {
		e.createSession(newSession(fmt.Sprintf("steady-%d", i), "arena", 1))
	}
	for i := range 10 {
		e.waitForReady(fmt.Sprintf("steady-%d", i))
	}
	e.waitForDeploymentsSettled()
	// Let the first controller see the settled Deployments before it stops.
	time.Sleep(time.Second)
	first.stop(t)

	second := e.startController(func(o *app.Options) { o.ResyncPeriod = time.Second })
	// Several resync periods: every session is synced again and again.
	time.Sleep(5 * time.Second)
	// client-go 1.37 informers stream their initial list over a watch
	// (WatchListClient), so either verb proves the informer ran.
	if second.requests.count("list gamesessions")+second.requests.count("watch gamesessions") == 0 {
		t.Fatalf("the restarted controller never listed or watched GameSessions; is it running?")
	}
	if writes := second.requests.writes(); len(writes) != 0 {
		t.Errorf("a controller restarted in sync wrote %v, want nothing", writes)
	}
}
