package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/tools/leaderelection"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"
)

// Namespace prefixes the controller's own metrics. client-go's keep their
// usual unprefixed names (workqueue_*, rest_client_*, leader_election_*), so
// dashboards and alerts written for Kubernetes controllers work unchanged.
const Namespace = "gamesession_controller"

// Values of the result label of ControllerMetrics.Syncs
// (gamesession_controller_syncs_total).
const (
	// SyncSuccess is a sync that ended without error.
	SyncSuccess = "success"
	// SyncConflict is an update rejected because the cached object was stale.
	// It is retried and is normal under load, so it is counted apart from
	// errors that deserve an alert.
	SyncConflict = "conflict"
	// SyncError is any other failed sync. Like a conflict, it is retried
	// with backoff.
	SyncError = "error"
)

// The queues of gamesession_controller_syncs_total, sync_duration_seconds and
// dropped_keys_total.
const (
	// QueueSessions is the queue of GameSession keys.
	QueueSessions = "gamesessions"
	// QueueProfiles is the queue of profile keys (revisions and rollout plans).
	QueueProfiles = "profiles"
)

// ControllerMetrics are the series one controller produces. Each controller
// gets its own set, registered on the registry it is given, so two controllers
// in one process (tests, embedders) never share counts. Only client-go's
// process-wide hooks (work queue, REST client, leader election) stay global.
type ControllerMetrics struct {
	// Syncs counts syncs by queue (QueueSessions, QueueProfiles) and result.
	Syncs *prometheus.CounterVec
	// Dropped counts keys a work queue gave up on after too many failed
	// syncs in a row, by queue (QueueSessions, QueueProfiles). A dropped key
	// waits for its object's next event or resync; until then nothing
	// retries it, so an alert must see it.
	Dropped *prometheus.CounterVec
	// SyncDuration is the time one sync takes, by queue. An in-order
	// session syncs from the caches alone in microseconds; the upper buckets
	// are there for syncs that wait on the API server.
	SyncDuration *prometheus.HistogramVec
	// ProfileFanOut is the number of sessions enqueued by one change of a
	// profile's data. Buckets reach beyond ten thousand because one profile
	// may be shared by thousands of sessions.
	ProfileFanOut prometheus.Histogram
	// RolloutSessions counts, per profile with a rollout in progress, its
	// sessions by state: total, moved (to the new revision), ready (moved
	// and Ready), failed (moved and past their progress deadline).
	// RolloutHalted is 1 while a profile's rollout is halted by the brake,
	// RolloutPaused while it is paused. A profile's series exist only while
	// its rollout is in progress (they are deleted when it completes or the
	// profile goes), so their number is bounded by the rollouts running at
	// once, not by the profiles in the cluster.
	RolloutSessions *prometheus.GaugeVec
	RolloutHalted   *prometheus.GaugeVec
	RolloutPaused   *prometheus.GaugeVec
	// RolloutWaiting is 1 while a profile's rollout waits for its
	// maintenance window to open.
	RolloutWaiting *prometheus.GaugeVec
	// BudgetSessions counts the sessions of the cluster-wide rollout
	// budget, by state: moving (granted a move, not yet Ready) and waiting
	// (refused one for want of room).
	BudgetSessions *prometheus.GaugeVec
	// SecretDigestKey is 1 for the state of the Secret of the digest key,
	// 0 for the others: present (it holds the key this process digests
	// under), missing (deleted), replaced (it holds another key).
	SecretDigestKey *prometheus.GaugeVec
	// SecretDigestsAdopted counts the Deployments whose Secret digest was
	// made under a key no process holds any more, and which the current
	// key took over without restarting their game servers.
	SecretDigestsAdopted prometheus.Counter
}

// Values of the state label of RolloutSessions.
const (
	RolloutTotal  = "total"
	RolloutMoved  = "moved"
	RolloutReady  = "ready"
	RolloutFailed = "failed"
	// RolloutDeferred: busy sessions not moved yet, waiting until idle.
	RolloutDeferred = "deferred"
	// RolloutPending: moved, neither Ready nor failed yet: rolling out, or,
	// delivered live, not acknowledged by every game server yet.
	RolloutPending = "pending"
)

// Values of the state label of BudgetSessions.
const (
	BudgetMoving  = "moving"
	BudgetWaiting = "waiting"
)

// NewControllerMetrics returns a fresh, unregistered set of a controller's series.
func NewControllerMetrics() *ControllerMetrics {
	m := &ControllerMetrics{
		Syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "syncs_total",
			Help:      "Syncs by queue (gamesessions, profiles) and result: success, conflict (stale cache, retried) or error.",
		}, []string{"queue", "result"}),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "dropped_keys_total",
			Help:      "Keys dropped from a work queue after repeated sync failures, by queue: they are retried only at their next event or resync.",
		}, []string{"queue"}),
		SyncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "sync_duration_seconds",
			Help:      "Time taken by one sync, by queue (gamesessions, profiles).",
			Buckets:   prometheus.ExponentialBuckets(0.0001, 4, 10), // 100µs to about 26s
		}, []string{"queue"}),
		ProfileFanOut: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "profile_fanout_sessions",
			Help:      "GameSessions enqueued by one change of a profile ConfigMap's data.",
			Buckets:   []float64{0, 1, 4, 16, 64, 256, 1024, 4096, 16384, 65536},
		}),
		RolloutSessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "rollout_sessions",
			Help:      "Sessions of a profile whose rollout is in progress, by state: total, moved, ready, failed, pending (moved, neither ready nor failed yet), deferred (busy, not moved until idle). Delivered live: moved is delivered, ready is applied by every game server.",
		}, []string{"namespace", "profile", "state"}),
		RolloutHalted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "rollout_halted",
			Help:      "1 while a profile's rollout is halted because too many moved sessions failed.",
		}, []string{"namespace", "profile"}),
		RolloutPaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "rollout_paused",
			Help:      "1 while a profile's rollout is paused by its annotation.",
		}, []string{"namespace", "profile"}),
		RolloutWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "rollout_waiting_for_window",
			Help:      "1 while a profile's rollout waits for its maintenance window to open.",
		}, []string{"namespace", "profile"}),
		BudgetSessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "cluster_budget_sessions",
			Help:      "Sessions of the cluster-wide rollout budget, by state: moving (moved to a new revision, not yet Ready), waiting (for room in the budget).",
		}, []string{"state"}),
		SecretDigestKey: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "secret_digest_key",
			Help:      "1 for the state of the Secret of the digest key, 0 for the others: present (it holds the key this process digests under), missing (deleted), replaced (it holds another key).",
		}, []string{"state"}),
		SecretDigestsAdopted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "secret_digests_adopted_total",
			Help:      "Deployments whose Secret digest was made under a digest key no process holds any more, taken over by the current key without a restart.",
		}),
	}
	// Start every sync result at zero, so rate() and alerts on errors work
	// before the first error ever happens.
	for _, queue := range []string{QueueSessions, QueueProfiles} {
		for _, result := range []string{SyncSuccess, SyncConflict, SyncError} {
			m.Syncs.WithLabelValues(queue, result)
		}
		m.Dropped.WithLabelValues(queue)
	}
	return m
}

// Collectors returns the series, for a registry to register.
func (m *ControllerMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Syncs, m.Dropped, m.SyncDuration, m.ProfileFanOut,
		m.RolloutSessions, m.RolloutHalted, m.RolloutPaused, m.RolloutWaiting, m.BudgetSessions,
		m.SecretDigestKey, m.SecretDigestsAdopted}
}

// ObserveDigestKey records the state of the Secret of the digest key.
func (m *ControllerMetrics) ObserveDigestKey(state string) {
	for _, s := range []string{"present", "missing", "replaced"} {
		m.SecretDigestKey.WithLabelValues(s).Set(boolGauge(s == state))
	}
}

// RolloutProgress is one profile's rollout, as ObserveRollout records it.
type RolloutProgress struct {
	// Total, Moved, Ready and Failed count the sessions in the rollout: all
	// of them, those on the new revision, those moved and Ready, and those
	// moved and past their progress deadline (the states of RolloutSessions).
	Total, Moved, Ready, Failed int
	// Deferred counts the busy sessions waiting until idle.
	Deferred int
	// Halted, Paused and Waiting are the rollout's phase, for RolloutHalted,
	// RolloutPaused and RolloutWaiting.
	Halted, Paused, Waiting bool
}

// ObserveRollout records the progress of a profile's rollout in progress.
func (m *ControllerMetrics) ObserveRollout(namespace, profile string, p RolloutProgress) {
	for state, n := range map[string]int{RolloutTotal: p.Total, RolloutMoved: p.Moved, RolloutReady: p.Ready,
		RolloutFailed: p.Failed, RolloutPending: max(p.Moved-p.Ready-p.Failed, 0), RolloutDeferred: p.Deferred} {
		m.RolloutSessions.WithLabelValues(namespace, profile, state).Set(float64(n))
	}
	m.RolloutHalted.WithLabelValues(namespace, profile).Set(boolGauge(p.Halted))
	m.RolloutPaused.WithLabelValues(namespace, profile).Set(boolGauge(p.Paused))
	m.RolloutWaiting.WithLabelValues(namespace, profile).Set(boolGauge(p.Waiting))
}

// ObserveBudget records the cluster-wide budget's sessions.
func (m *ControllerMetrics) ObserveBudget(moving, waiting int) {
	m.BudgetSessions.WithLabelValues(BudgetMoving).Set(float64(moving))
	m.BudgetSessions.WithLabelValues(BudgetWaiting).Set(float64(waiting))
}

// ForgetRollout deletes a profile's rollout series: its rollout completed, or
// the profile is gone.
func (m *ControllerMetrics) ForgetRollout(namespace, profile string) {
	labels := prometheus.Labels{"namespace": namespace, "profile": profile}
	m.RolloutSessions.DeletePartialMatch(labels)
	m.RolloutHalted.Delete(labels)
	m.RolloutPaused.Delete(labels)
	m.RolloutWaiting.Delete(labels)
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ObserveSync records one sync's result and duration; queue is
// QueueSessions or QueueProfiles.
func (m *ControllerMetrics) ObserveSync(queue, result string, d time.Duration) {
	m.Syncs.WithLabelValues(queue, result).Inc()
	m.SyncDuration.WithLabelValues(queue).Observe(d.Seconds())
}

// ObserveDropped records that queue (QueueSessions or QueueProfiles) gave up
// on a key.
func (m *ControllerMetrics) ObserveDropped(queue string) {
	m.Dropped.WithLabelValues(queue).Inc()
}

// ObserveFanOut records how many sessions one profile change enqueued.
func (m *ControllerMetrics) ObserveFanOut(sessions int) {
	m.ProfileFanOut.Observe(float64(sessions))
}

// init installs the Prometheus adapters for client-go's work queue, REST
// client and leader election metrics, as Kubernetes' own component-base does.
// They are process-wide hooks: client-go keeps the first provider set and
// reads them on every request without a lock, so they must be in place before
// any client or queue exists, which only package initialisation guarantees
// (a later call would race with clients already running, and is ignored).
func init() {
	workqueue.SetProvider(workqueueProvider{})
	leaderelection.SetProvider(leaderProvider{})
	clientmetrics.Register(clientmetrics.RegisterOpts{
		RequestLatency:     &requestLatency{requestLatencyVec},
		RateLimiterLatency: &requestLatency{rateLimiterLatencyVec},
		RequestResult:      &requestResult{requestsTotalVec},
		RequestRetry:       &requestRetry{requestRetriesVec},
	})
}

// packageCollectors returns the process-wide collectors behind client-go's
// hooks, which every registry exposes.
func packageCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		workqueueDepth, workqueueAdds, workqueueLatency, workqueueWorkDuration,
		workqueueUnfinishedWork, workqueueLongestRunning, workqueueRetries,
		requestsTotalVec, requestLatencyVec, rateLimiterLatencyVec, requestRetriesVec,
		leaderStatus, leaderSlowpath,
	}
}

// NewRegistry returns a registry, not the global default one, with the Go
// runtime and process collectors, client-go's metrics and the extra collectors
// given (a controller's own metrics, the session collector). A dedicated registry exposes exactly
// these, whatever other packages register globally.
func NewRegistry(extra ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	all := append([]prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, packageCollectors()...)
	for _, c := range append(all, extra...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// Handler serves the registry's metrics in the Prometheus exposition formats.
// It also counts its own scrapes (promhttp_metric_handler_*) in reg.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		// A collector that fails (a broken lister, say) must not hide the
		// other metrics, which are needed most when something is wrong.
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      reg,
	}))
}
