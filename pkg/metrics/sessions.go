package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	gameslisters "github.com/example/gamesession-controller/pkg/generated/listers/games/v1"
)

var (
	sessionsDesc = prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "", "sessions"),
		"GameSessions in the controller's cache.",
		nil, nil)
	sessionConditionsDesc = prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "", "session_conditions"),
		"GameSessions by status condition type and status. A session counts once per condition type it has.",
		[]string{"condition", "status"}, nil)
)

// knownConditions are always reported, at zero if no session has them, so
// that an alert on e.g. Ready=False or Stalled=True sees 0 rather than no
// data. Stalled and Reconciling are present only while True.
var knownConditions = []string{gamesv1.ConditionReady, gamesv1.ConditionProfileResolved,
	gamesv1.ConditionStalled, gamesv1.ConditionReconciling}

var conditionStatuses = []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}

// SessionCollector reports GameSessions by condition, counted from the
// informer cache at scrape time. Counting at scrape time needs no bookkeeping
// in the sync path and cannot drift from the cache, and a scrape every few
// seconds costs one pass over pointers already in memory.
//
// It reports nothing until SetSource is called with a synced cache: a standby
// replica has no cache, and a cache still filling would under-count.
type SessionCollector struct {
	mu     sync.Mutex
	lister gameslisters.GameSessionLister
	synced func() bool
}

var _ prometheus.Collector = (*SessionCollector)(nil)

// NewSessionCollector returns a collector with no source yet.
func NewSessionCollector() *SessionCollector {
	return &SessionCollector{}
}

// SetSource makes the collector count the sessions of lister once synced
// returns true. A nil lister stops reporting, for when the controller stops.
func (c *SessionCollector) SetSource(lister gameslisters.GameSessionLister, synced func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lister, c.synced = lister, synced
}

// Describe implements prometheus.Collector.
func (c *SessionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sessionsDesc
	ch <- sessionConditionsDesc
}

// Collect implements prometheus.Collector.
func (c *SessionCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	lister, synced := c.lister, c.synced
	c.mu.Unlock()
	if lister == nil || (synced != nil && !synced()) {
		return
	}
	sessions, err := lister.List(labels.Everything())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(sessionsDesc, err)
		return
	}

	type key struct {
		condition string
		status    metav1.ConditionStatus
	}
	counts := make(map[key]int)
	for _, condition := range knownConditions {
		for _, status := range conditionStatuses {
			counts[key{condition, status}] = 0
		}
	}
	for _, s := range sessions {
		for _, cond := range s.Status.Conditions {
			counts[key{cond.Type, cond.Status}]++
		}
	}

	ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(len(sessions)))
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(sessionConditionsDesc, prometheus.GaugeValue, float64(n), k.condition, string(k.status))
	}
}
