package metrics

import (
	"context"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// REST client metrics. Labels are verb and host only, never the URL path:
// paths carry namespaces and object names, and would make a series per
// GameSession.
var (
	requestLatencyBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}

	requestsTotalVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_requests_total",
		Help: "Requests to the API server, by status code, method and host.",
	}, []string{"code", "method", "host"})

	requestLatencyVec = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_request_duration_seconds",
		Help:    "Latency of requests to the API server, by verb and host.",
		Buckets: requestLatencyBuckets,
	}, []string{"verb", "host"})

	// Time spent waiting on the client-side rate limiter (--kube-api-qps and
	// --kube-api-burst). If it grows, the limit, not the API server, is what
	// slows a fan-out down.
	rateLimiterLatencyVec = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_rate_limiter_duration_seconds",
		Help:    "Time requests waited on the client-side rate limiter, by verb and host.",
		Buckets: requestLatencyBuckets,
	}, []string{"verb", "host"})

	requestRetriesVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_request_retries_total",
		Help: "Requests to the API server that were retried, by status code, method and host.",
	}, []string{"code", "method", "host"})
)

type requestLatency struct{ vec *prometheus.HistogramVec }

var _ clientmetrics.LatencyMetric = (*requestLatency)(nil)

func (m *requestLatency) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	m.vec.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}

type requestResult struct{ vec *prometheus.CounterVec }

var _ clientmetrics.ResultMetric = (*requestResult)(nil)

func (m *requestResult) Increment(_ context.Context, code, method, host string) {
	m.vec.WithLabelValues(code, method, host).Inc()
}

type requestRetry struct{ vec *prometheus.CounterVec }

var _ clientmetrics.RetryMetric = (*requestRetry)(nil)

func (m *requestRetry) IncrementRetry(_ context.Context, code, method, host string) {
	m.vec.WithLabelValues(code, method, host).Inc()
}
