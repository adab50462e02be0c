package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection"
)

var (
	// leaderStatus is 1 on the replica that holds the lease and 0 on the
	// others, so `sum by (name)` must always be 1 across replicas.
	leaderStatus = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leader_election_master_status",
		Help: "1 if this replica holds the leader election lease, else 0.",
	}, []string{"name"})

	leaderSlowpath = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leader_election_slowpath_total",
		Help: "Lease renewals by the leader whose optimistic update failed and that re-read the lease.",
	}, []string{"name"})
)

type leaderProvider struct{}

var _ leaderelection.MetricsProvider = leaderProvider{}

func (leaderProvider) NewLeaderMetric() leaderelection.LeaderMetric { return leaderMetric{} }

type leaderMetric struct{}

func (leaderMetric) On(name string)                { leaderStatus.WithLabelValues(name).Set(1) }
func (leaderMetric) Off(name string)               { leaderStatus.WithLabelValues(name).Set(0) }
func (leaderMetric) SlowpathExercised(name string) { leaderSlowpath.WithLabelValues(name).Inc() }
