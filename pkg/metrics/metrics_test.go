package metrics

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	gameslisters "github.com/example/gamesession-controller/pkg/generated/listers/games/v1"
)

// scrape serves reg through Handler, as Prometheus would read it, and
// returns the text exposition.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	srv := httptest.NewServer(Handler(reg))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatalf("scraping: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the scrape: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape returned %s:\n%s", resp.Status, body)
	}
	return string(body)
}

func newRegistry(t *testing.T, extra ...prometheus.Collector) *prometheus.Registry {
	t.Helper()
	reg, err := NewRegistry(extra...)
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	return reg
}

func wantLines(t *testing.T, exposition string, lines ...string) {
	t.Helper()
	for _, line := range lines {
		if !strings.Contains(exposition, "\n"+line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", exposition)
	}
}

// NewRegistry runs once per app.Run, and tests run app.Run many times in one
// process.
func TestNewRegistryRepeats(t *testing.T) {
	for range 3 {
		reg, err := NewRegistry(NewSessionCollector())
		if err != nil {
			t.Fatalf("NewRegistry: %v", err)
		}
		if _, err := reg.Gather(); err != nil {
			t.Fatalf("Gather: %v", err)
		}
	}
}

func TestNewRegistryRejectsDuplicateCollector(t *testing.T) {
	m := NewControllerMetrics()
	if _, err := NewRegistry(append(m.Collectors(), m.Syncs)...); err == nil {
		t.Fatal("NewRegistry accepted a collector it already registers")
	}
}

func TestWorkqueueMetrics(t *testing.T) {
	reg := newRegistry(t)
	// Series of a queue name outlive the queue: a fresh name per run keeps -count=N exact.
	queueName := fmt.Sprintf("metrics-test-%d", time.Now().UnixNano())
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: queueName})
	defer q.ShutDown()

	q.Add("a")
	q.Add("b")
	item, _ := q.Get()
	q.Done(item)
	q.AddRateLimited(item) // a retry, added back after its backoff
	// Scrape only once the retry is back, so the figures are settled.
	for deadline := time.Now().Add(5 * time.Second); q.Len() < 2; {
		if time.Now().After(deadline) {
			t.Fatal("the retried item never came back")
		}
		time.Sleep(time.Millisecond)
	}

	exposition := scrape(t, reg)
	wantLines(t, exposition,
		fmt.Sprintf(`workqueue_adds_total{name="%s"} 3`, queueName),
		fmt.Sprintf(`workqueue_retries_total{name="%s"} 1`, queueName),
		fmt.Sprintf(`workqueue_depth{name="%s"} 2`, queueName),
		fmt.Sprintf(`workqueue_queue_duration_seconds_count{name="%s"} 1`, queueName),
		fmt.Sprintf(`workqueue_work_duration_seconds_count{name="%s"} 1`, queueName),
	)
	for _, name := range []string{"workqueue_unfinished_work_seconds", "workqueue_longest_running_processor_seconds"} {
		if !strings.Contains(exposition, name+`{name="`+queueName+`"}`) {
			t.Errorf("scrape lacks %s for the queue", name)
		}
	}
}

// A queue re-created under the same name, as by a controller restarted in the
// same process, adds to the same series instead of failing.
func TestWorkqueueSameNameSharesSeries(t *testing.T) {
	reg := newRegistry(t)
	for range 2 {
		q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "metrics-test-shared"})
		q.Add("x")
		q.ShutDown()
	}
	wantLines(t, scrape(t, reg), `workqueue_adds_total{name="metrics-test-shared"} 2`)
}

func TestRESTClientMetrics(t *testing.T) {
	reg := newRegistry(t)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"p","namespace":"ns"}}`)
	}))
	defer api.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ConfigMaps("ns").Get(context.Background(), "p", metav1.GetOptions{}); err != nil {
		t.Fatalf("GET: %v", err)
	}

	host := strings.TrimPrefix(api.URL, "http://")
	exposition := scrape(t, reg)
	wantLines(t, exposition,
		`rest_client_requests_total{code="200",host="`+host+`",method="GET"} 1`,
		`rest_client_request_duration_seconds_count{host="`+host+`",verb="GET"} 1`,
	)
	if !strings.Contains(exposition, `rest_client_rate_limiter_duration_seconds_count{host="`+host+`",verb="GET"}`) {
		t.Errorf("scrape lacks the rate limiter latency of the GET")
	}
}

func TestRESTClientMetricsLabelsCarryNoPath(t *testing.T) {
	reg := prometheus.NewRegistry()
	vec := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "test_latency_seconds", Help: "x"}, []string{"verb", "host"})
	reg.MustRegister(vec)
	u, _ := url.Parse("https://api.example:6443/apis/games.example.com/v1/namespaces/ns/gamesessions/a")
	(&requestLatency{vec}).Observe(context.Background(), "PUT", *u, time.Second)
	mfs, _ := reg.Gather()
	labels := mfs[0].GetMetric()[0].GetLabel()
	if len(labels) != 2 || labels[0].GetValue() != "api.example:6443" || labels[1].GetValue() != "PUT" {
		t.Errorf("labels = %v, want host and verb only", labels)
	}
}

func TestControllerMetrics(t *testing.T) {
	m := NewControllerMetrics()
	reg := newRegistry(t, m.Collectors()...)
	m.ObserveSync(QueueSessions, SyncConflict, 3*time.Millisecond)
	m.ObserveFanOut(7340)

	exposition := scrape(t, reg)
	wantLines(t, exposition, `gamesession_controller_syncs_total{queue="gamesessions",result="conflict"} 1`)
	// Every queue and result exists from the start, at zero if need be.
	for _, queue := range []string{QueueSessions, QueueProfiles} {
		for _, result := range []string{SyncSuccess, SyncConflict, SyncError} {
			if !strings.Contains(exposition, `gamesession_controller_syncs_total{queue="`+queue+`",result="`+result+`"}`) {
				t.Errorf("scrape lacks syncs_total for queue %q and result %q", queue, result)
			}
		}
	}
	wantLines(t, exposition, `gamesession_controller_profile_fanout_sessions_bucket{le="16384"} 1`)
	if !strings.Contains(exposition, "gamesession_controller_sync_duration_seconds_count") {
		t.Error("scrape lacks the sync duration histogram")
	}
}

func scrapeValue(t *testing.T, reg *prometheus.Registry, series string) float64 {
	t.Helper()
	for line := range strings.SplitSeq(scrape(t, reg), "\n") {
		if value, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			if _, err := fmt.Sscan(value, &v); err != nil {
				t.Fatalf("parsing %q: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("no series %s", series)
	return 0
}

func TestLeaderMetric(t *testing.T) {
	reg := newRegistry(t)
	m := leaderProvider{}.NewLeaderMetric()
	m.On("metrics-test-lease")
	wantLines(t, scrape(t, reg), `leader_election_master_status{name="metrics-test-lease"} 1`)
	m.Off("metrics-test-lease")
	wantLines(t, scrape(t, reg), `leader_election_master_status{name="metrics-test-lease"} 0`)
}

func session(name string, conditions ...metav1.Condition) *gamesv1.GameSession {
	return &gamesv1.GameSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Status:     gamesv1.GameSessionStatus{Conditions: conditions},
	}
}

func cond(conditionType string, status metav1.ConditionStatus) metav1.Condition {
	return metav1.Condition{Type: conditionType, Status: status}
}

func TestSessionCollector(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, s := range []*gamesv1.GameSession{
		session("a", cond(gamesv1.ConditionReady, metav1.ConditionTrue), cond(gamesv1.ConditionProfileResolved, metav1.ConditionTrue)),
		session("b", cond(gamesv1.ConditionReady, metav1.ConditionTrue), cond(gamesv1.ConditionProfileResolved, metav1.ConditionTrue)),
		session("c", cond(gamesv1.ConditionReady, metav1.ConditionFalse), cond(gamesv1.ConditionProfileResolved, metav1.ConditionFalse),
			cond(gamesv1.ConditionStalled, metav1.ConditionTrue)),
		session("d"), // not synced yet: no conditions
	} {
		if err := indexer.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	sessions := NewSessionCollector()
	reg := newRegistry(t, sessions)

	// No source (a standby) and an unsynced source report nothing.
	if exposition := scrape(t, reg); strings.Contains(exposition, "gamesession_controller_session") {
		t.Errorf("reported sessions without a source:\n%s", exposition)
	}
	synced := false
	sessions.SetSource(gameslisters.NewGameSessionLister(indexer), func() bool { return synced })
	if exposition := scrape(t, reg); strings.Contains(exposition, "gamesession_controller_session") {
		t.Errorf("reported sessions before the cache synced:\n%s", exposition)
	}

	synced = true
	wantLines(t, scrape(t, reg),
		`gamesession_controller_sessions 4`,
		`gamesession_controller_session_conditions{condition="Ready",status="True"} 2`,
		`gamesession_controller_session_conditions{condition="Ready",status="False"} 1`,
		`gamesession_controller_session_conditions{condition="Ready",status="Unknown"} 0`,
		`gamesession_controller_session_conditions{condition="ProfileResolved",status="True"} 2`,
		`gamesession_controller_session_conditions{condition="ProfileResolved",status="False"} 1`,
		`gamesession_controller_session_conditions{condition="Stalled",status="True"} 1`,
		`gamesession_controller_session_conditions{condition="Reconciling",status="True"} 0`,
	)

	sessions.SetSource(nil, nil)
	if exposition := scrape(t, reg); strings.Contains(exposition, "gamesession_controller_session") {
		t.Errorf("reported sessions after the source was removed:\n%s", exposition)
	}
}

type failingLister struct{ gameslisters.GameSessionLister }

func (failingLister) List(labels.Selector) ([]*gamesv1.GameSession, error) {
	return nil, apierrors.NewServiceUnavailable("broken")
}

// A failing collector must not take the other metrics down with it.
func TestSessionCollectorErrorKeepsOtherMetrics(t *testing.T) {
	sessions := NewSessionCollector()
	reg := newRegistry(t, append(NewControllerMetrics().Collectors(), sessions)...)
	sessions.SetSource(failingLister{}, nil)
	if exposition := scrape(t, reg); !strings.Contains(exposition, "gamesession_controller_syncs_total") {
		t.Errorf("scrape with a failing collector lost the other metrics:\n%s", exposition)
	}
}

// Metric names and help texts follow the Prometheus conventions, which is
// what lets generic dashboards and recording rules apply to them.
func TestMetricsLint(t *testing.T) {
	m := NewControllerMetrics()
	reg := newRegistry(t, m.Collectors()...)
	// Make every vector have a child, so that it is gathered and linted.
	m.ObserveSync(QueueSessions, SyncSuccess, time.Millisecond)
	m.ObserveFanOut(1)
	(&requestLatency{requestLatencyVec}).Observe(context.Background(), "GET", url.URL{Host: "h"}, time.Millisecond)
	(&requestLatency{rateLimiterLatencyVec}).Observe(context.Background(), "GET", url.URL{Host: "h"}, time.Millisecond)
	(&requestResult{requestsTotalVec}).Increment(context.Background(), "200", "GET", "h")
	(&requestRetry{requestRetriesVec}).IncrementRetry(context.Background(), "500", "GET", "h")
	leaderMetric{}.SlowpathExercised("lint")
	workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "lint"}).ShutDown()

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// Two controllers in one process count apart: a sync of one is not a sync of
// the other.
func TestControllerMetricsAreNotShared(t *testing.T) {
	a, b := NewControllerMetrics(), NewControllerMetrics()
	regA, regB := newRegistry(t, a.Collectors()...), newRegistry(t, b.Collectors()...)
	a.ObserveSync(QueueSessions, SyncSuccess, time.Millisecond)
	wantLines(t, scrape(t, regA), `gamesession_controller_syncs_total{queue="gamesessions",result="success"} 1`)
	wantLines(t, scrape(t, regB), `gamesession_controller_syncs_total{queue="gamesessions",result="success"} 0`)
}
