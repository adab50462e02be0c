// Package app wires the GameSession controller: clients, filtered informer
// factories and the controller itself. main parses flags into Options and calls
// Run; tests call Run in-process and stop it by cancelling its context.
package app

import (
	"flag"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// Options configure the controller process.
type Options struct {
	Kubeconfig string
	Master     string
	// Namespace restricts every informer to one namespace; empty means all.
	Namespace string

	Workers      int
	KubeAPIQPS   float64
	KubeAPIBurst int
	ResyncPeriod time.Duration

	// ProfileSelector selects the ConfigMaps that can serve as profiles. Only
	// those are listed, watched and cached.
	ProfileSelector string

	// RESTConfig, when set, is used instead of Kubeconfig and Master. Tests
	// use it to run the controller with a given identity.
	RESTConfig *rest.Config
}

// NewOptions returns Options with their defaults.
//
// client-go's default client rate limit (5 QPS, burst 10) would make one edit
// of a profile shared by 7,340 sessions take about 25 minutes to roll out; the
// defaults here let the fan-out run at the speed the API server allows, which
// API Priority and Fairness protects on the server side.
func NewOptions() *Options {
	return &Options{
		Workers:         16,
		KubeAPIQPS:      1000,
		KubeAPIBurst:    2000,
		ResyncPeriod:    10 * time.Minute,
		ProfileSelector: labels.SelectorFromSet(labels.Set{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue}).String(),
	}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig. Empty: the in-cluster configuration.")
	fs.StringVar(&o.Master, "master", o.Master, "Address of the Kubernetes API server. Overrides the one in the kubeconfig.")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Only manage GameSessions in this namespace. Empty: all namespaces.")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Number of GameSessions synced in parallel.")
	fs.Float64Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Sustained queries per second to the API server (client-side limit).")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of queries to the API server above --kube-api-qps.")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", o.ResyncPeriod, "How often every GameSession is re-checked even without events. A re-check of a session in order writes nothing.")
	fs.StringVar(&o.ProfileSelector, "profile-selector", o.ProfileSelector, "Label selector of the ConfigMaps that may serve as profiles. Others are never cached.")
}

// Validate reports the first invalid option.
func (o *Options) Validate() error {
	if o.Workers < 1 {
		return fmt.Errorf("--workers must be at least 1, got %d", o.Workers)
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst < 1 {
		return fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive, got %g and %d", o.KubeAPIQPS, o.KubeAPIBurst)
	}
	if o.ResyncPeriod < 0 {
		return fmt.Errorf("--resync-period must not be negative, got %s", o.ResyncPeriod)
	}
	sel, err := labels.Parse(o.ProfileSelector)
	if err != nil {
		return fmt.Errorf("--profile-selector: %w", err)
	}
	if sel.Empty() {
		// An empty selector would cache every ConfigMap in the cluster.
		return fmt.Errorf("--profile-selector must not be empty")
	}
	return nil
}
