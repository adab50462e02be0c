// Package metrics defines the controller's Prometheus metrics and the adapters
// that feed client-go's work queue, REST client and leader election metrics
// into Prometheus.
//
// client-go reports those through process-global hooks that accept one
// provider per process, so package initialisation installs them once
// (metrics.go) and the collectors behind them (workqueue.go, restclient.go,
// leaderelection.go) are package-level. The controller's own series are not:
// each controller gets a [ControllerMetrics] of its own, and each
// [NewRegistry] call returns a fresh registry, so several controllers started
// in one test process each serve their own /metrics, with their own counts.
// [SessionCollector] (sessions.go) counts sessions by condition from the
// informer cache at scrape time, so the sync path keeps no counts of its own.
package metrics
