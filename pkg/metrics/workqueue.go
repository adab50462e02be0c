package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// Work queue metrics, labelled by queue name. Names and buckets are the ones
// Kubernetes controllers expose, so existing dashboards apply.
var (
	workqueueDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "workqueue_depth",
		Help: "Current depth of the work queue.",
	}, []string{"name"})

	workqueueAdds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "workqueue_adds_total",
		Help: "Adds handled by the work queue.",
	}, []string{"name"})

	workqueueLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "workqueue_queue_duration_seconds",
		Help:    "How long an item waits in the work queue before being handed to a worker.",
		Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12), // 10ns to 1000s
	}, []string{"name"})

	workqueueWorkDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "workqueue_work_duration_seconds",
		Help:    "How long processing one item from the work queue takes.",
		Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12),
	}, []string{"name"})

	workqueueUnfinishedWork = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "workqueue_unfinished_work_seconds",
		Help: "Seconds of work in progress not yet observed by work_duration. " +
			"A large value that keeps growing points to stuck workers.",
	}, []string{"name"})

	workqueueLongestRunning = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "workqueue_longest_running_processor_seconds",
		Help: "How long the longest-running worker of the queue has been working on its item.",
	}, []string{"name"})

	workqueueRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "workqueue_retries_total",
		Help: "Adds through the delaying queue (AddAfter, and AddRateLimited through it), with or without a delay: retries after errors, the fan-out's adds of a profile's sessions, rollout waits. Not an error count.",
	}, []string{"name"})
)

// workqueueProvider hands each named queue its series. Queues created with the
// same name share them, which is what a controller restarted in one process
// (tests, or a re-acquired lease) needs.
type workqueueProvider struct{}

var _ workqueue.MetricsProvider = workqueueProvider{}

func (workqueueProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return workqueueDepth.WithLabelValues(name)
}

func (workqueueProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return workqueueAdds.WithLabelValues(name)
}

func (workqueueProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return workqueueLatency.WithLabelValues(name)
}

func (workqueueProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return workqueueWorkDuration.WithLabelValues(name)
}

func (workqueueProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return workqueueUnfinishedWork.WithLabelValues(name)
}

func (workqueueProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return workqueueLongestRunning.WithLabelValues(name)
}

func (workqueueProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return workqueueRetries.WithLabelValues(name)
}
