package app

import (
	"cmp"
	"flag"
	"fmt"
	"net"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// Options configure the controller process.
type Options struct {
	// Kubeconfig and Master locate the API server (--kubeconfig, --master);
	// both empty means the in-cluster configuration.
	Kubeconfig string
	Master     string
	// Namespace restricts every informer to one namespace; empty means all.
	Namespace string

	// Workers is how many GameSessions are synced in parallel.
	Workers int
	// KubeAPIQPS and KubeAPIBurst are the client-side rate limit of the
	// controller's requests (see NewOptions for the defaults).
	KubeAPIQPS   float64
	KubeAPIBurst int
	// ResyncPeriod is how often the informers hand every cached object to
	// the controller again without an event: the safety net that re-checks
	// every session, which writes nothing for a session in order.
	ResyncPeriod time.Duration

	// ProfileSelector selects the ConfigMaps that can serve as profiles. Only
	// those are listed, watched and cached.
	ProfileSelector string
	// ProfileChangeDelay lets a burst of edits to one profile settle into a
	// single rollout of its sessions.
	ProfileChangeDelay time.Duration

	// Rollout policy defaults for profiles without rollout annotations, in
	// the annotations' syntax ("10" or "10%"; MaxFailed "" for no brake).
	RolloutMaxRolling string
	RolloutCanary     string
	RolloutMaxFailed  string
	// RolloutMaxDefer is how long busy sessions may hold back their move, in
	// time the profile's maintenance window has been open since the rollout
	// started (all the time, without a window): a duration, or "never".
	RolloutMaxDefer string
	// MaxMovingSessions and MaxMovesPerMinute are the cluster-wide budget of
	// profile moves, across all profiles. 0: no limit.
	MaxMovingSessions int
	MaxMovesPerMinute int
	// ReferenceGrantRecheck is how often a cluster-wide controller that
	// found no ReferenceGrant API at start-up looks for it again, so that a
	// Gateway API install later needs no restart. 0: never.
	ReferenceGrantRecheck time.Duration
	// RevisionHistoryLimit is how many of each profile's newest revisions
	// are kept for rollback besides those in use.
	RevisionHistoryLimit int

	// LeaderElect runs the controller only while this process holds the
	// Lease LeaderElectionNamespace/LeaderElectionID. Off by default, because
	// `make run` and the tests run a single instance and should not wait for a
	// lease; the Deployment in artifacts/ turns it on for its two replicas.
	LeaderElect bool
	// WatchSecrets rolls the game servers of a session when a labelled
	// Secret its pod template references changes (gamesv1.SecretLabel).
	WatchSecrets bool
	// WatchSessionConfigs rolls the game servers of a session when a
	// labelled ConfigMap its pod template reads changes
	// (gamesv1.SessionConfigLabel).
	WatchSessionConfigs bool
	// LiveDelivery lets a profile deliver its content to running game
	// servers (rollout.games.example.com/delivery: live): the controller
	// then caches the sessions' live profiles and the pods of live
	// sessions, and needs update on ConfigMaps and list and watch on pods.
	// On by default; off, a profile that asks for live delivery is paused
	// with an error (profileController.policyOf).
	LiveDelivery bool
	// SecretDigestKey is the Secret, "name" in the controller's own
	// namespace or "namespace/name", that holds the key of the Secret
	// digests; the controller creates it the first time.
	SecretDigestKey string
	// DeploymentWrites is how the controller writes its Deployments:
	// "update" (the whole object, cheapest for the API server), "patch"
	// (the fields that differ), or "auto": update, unless the API server is
	// newer than the Kubernetes API this build was made with, whose fields
	// an update from the cache would erase (see deploymentWritesFor).
	DeploymentWrites string

	// LeaderElectionNamespace holds the Lease. Empty: the pod's own
	// namespace with the in-cluster configuration, else Namespace, else
	// "default" (leaderElectionNamespace).
	LeaderElectionNamespace string
	// LeaderElectionID names the Lease.
	LeaderElectionID string
	// LeaseDuration, RenewDeadline and RetryPeriod are the timings of
	// client-go's leader election: how long a standby waits after the last
	// renewal, how long the leader retries a failed renewal before it gives
	// up, and how often both try. NewOptions sets kube-controller-manager's.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration

	// MetricsBindAddress and HealthProbeBindAddress are host:port listen
	// addresses; "0" turns the server off.
	MetricsBindAddress     string
	HealthProbeBindAddress string

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
		// Long enough for an apply of several files or a script writing key
		// by key to land as one rollout; short enough that a single edit
		// still rolls out promptly.
		ProfileChangeDelay: 500 * time.Millisecond,
		// Unpaced by default: every session of a changed profile moves at
		// once, as before rollout policies existed. docs/operations.md
		// recommends a policy for game servers.
		RolloutMaxRolling:    "100%",
		RolloutCanary:        "0",
		RevisionHistoryLimit: 5,
		// A busy session (a match running) is never restarted by a rollout
		// unless a profile says how long it may wait.
		RolloutMaxDefer: rollout.MaxDeferNever,
		// Bounds on an accident, such as one sync editing every profile at
		// once, not a tuning: restarting 500 game servers at once, and a
		// thousand a minute, is within what a cluster of a few hundred nodes
		// absorbs. docs/rollouts.md says how to size them.
		MaxMovingSessions: 500,
		MaxMovesPerMinute: 1000,
		// One discovery request a minute while the API is missing.
		ReferenceGrantRecheck: time.Minute,

		WatchSecrets:        true,
		WatchSessionConfigs: true,
		// On, so that a profile may ask for live delivery: the artifacts
		// and the chart grant its rights. Off saves the pod cache and those
		// rights where no profile asks.
		LiveDelivery:     true,
		SecretDigestKey:  "gamesession-controller-secret-digest-key",
		DeploymentWrites: deploymentWritesAuto,

		LeaderElectionID: "gamesession-controller",
		// The timings of kube-controller-manager: a standby takes over at
		// most 15s after the leader stops renewing, and a leader that cannot
		// renew for 10s steps down, 5s before anyone else may take over.
		LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second,
		RetryPeriod:   2 * time.Second,

		MetricsBindAddress:     ":8080",
		HealthProbeBindAddress: ":8081",
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
	fs.DurationVar(&o.ProfileChangeDelay, "profile-change-delay", o.ProfileChangeDelay, "How long a profile's sessions wait after a change of its data before they roll, so that a burst of edits makes one rollout. 0: roll at once.")

	fs.StringVar(&o.RolloutMaxRolling, "rollout-max-rolling", o.RolloutMaxRolling, "Default rollout budget of a profile: at most this many (N) or this share (N%) of its sessions moved to a new revision and not yet Ready at once. A profile's annotation "+rollout.AnnotationMaxRolling+" overrides it.")
	fs.StringVar(&o.RolloutCanary, "rollout-canary", o.RolloutCanary, "Default canary of a profile's rollouts: the first N (or N%) sessions move first, and the rest wait until they are Ready. 0: no canary. Annotation "+rollout.AnnotationCanary+".")
	fs.StringVar(&o.RolloutMaxDefer, "rollout-max-defer", o.RolloutMaxDefer, "Default time busy sessions (label "+gamesv1.BusyLabel+"="+gamesv1.BusyLabelValue+") may hold back their move, counting the time the profile's maintenance window has been open since a rollout started (all the time, without a window): a duration such as 30m, after which they move busy or not, or \"never\". Annotation "+rollout.AnnotationMaxDefer+".")
	fs.IntVar(&o.MaxMovingSessions, "max-moving-sessions", o.MaxMovingSessions, "Cluster-wide budget: at most this many sessions, across all profiles, moved to a new profile revision and not yet Ready at once. 0: no limit.")
	fs.IntVar(&o.MaxMovesPerMinute, "max-moves-per-minute", o.MaxMovesPerMinute, "Cluster-wide budget: at most this many profile moves started in any minute, across all profiles. 0: no limit.")
	fs.DurationVar(&o.ReferenceGrantRecheck, "reference-grant-recheck", o.ReferenceGrantRecheck, "How often a cluster-wide controller that found no ReferenceGrant API (Gateway API's CRD) at start-up looks for it again; once found, profiles of other namespaces are used by grant without a restart. 0: never.")
	fs.StringVar(&o.RolloutMaxFailed, "rollout-max-failed", o.RolloutMaxFailed, "Default brake of a profile's rollouts: halt when more than N (or N%) of the sessions moved to a new revision fail (ProgressDeadlineExceeded). Empty: no brake. Annotation "+rollout.AnnotationMaxFailed+".")
	fs.IntVar(&o.RevisionHistoryLimit, "revision-history-limit", o.RevisionHistoryLimit, "How many of a profile's newest unused revisions are kept for rollback, besides the current one and those a Deployment mounts, which are always kept.")
	fs.BoolVar(&o.WatchSecrets, "watch-secrets", o.WatchSecrets, "Roll a session's game servers when a Secret its pod template references, labelled "+gamesv1.SecretLabel+"="+gamesv1.SecretLabelValue+", changes. Needs list and watch on Secrets; the controller caches a keyed digest of the labelled ones, never their data.")
	fs.BoolVar(&o.LiveDelivery, "live-delivery", o.LiveDelivery, "Deliver the content of profiles annotated rollout.games.example.com/delivery=live to running game servers, through a ConfigMap per session, and read their acknowledgments from their pods (caches the pods labelled games.example.com/delivery=live only, slimmed to their acknowledgment). Needs update on configmaps and list and watch on pods. Off: no pod cache and none of those rights needed, and a profile that asks for live delivery is paused, with a RolloutPolicyInvalid warning, until the annotation is removed or this is turned on.")
	fs.BoolVar(&o.WatchSessionConfigs, "watch-session-configs", o.WatchSessionConfigs, "Roll a session's game servers when a ConfigMap its pod template reads, labelled "+gamesv1.SessionConfigLabel+"="+gamesv1.SessionConfigLabelValue+", changes. The controller caches a digest of the labelled ones, never their data.")
	fs.StringVar(&o.DeploymentWrites, "deployment-writes", o.DeploymentWrites, "How Deployments are written: update (the whole object; the cheapest for the API server), patch (only the fields that differ), or auto: update, unless the API server is a newer Kubernetes than this build's API types (then a field they lack would be erased), and patch then.")
	fs.StringVar(&o.SecretDigestKey, "secret-digest-key", o.SecretDigestKey, "The Secret, NAME in the controller's own namespace or NAMESPACE/NAME, holding the key of the Secret digests in pod templates. Created the first time; during a rotation it also holds the key before, as \"previous\" (docs/tenancy.md). A lost key restarts no game server, but a Secret changed while no process held it rolls only at its next change.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Run the controller only while holding a Lease, so that several replicas can run with one active. Enable whenever more than one replica may run.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "Namespace of the leader election Lease. Empty: the pod's own namespace when running in a cluster, else --namespace, else \"default\".")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "Name of the leader election Lease. Replicas with the same namespace and name elect one leader.")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "How long a standby waits after the last renewal before it takes the lease over.")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "How long the leader keeps retrying a failed renewal before it gives up the lease and exits. Must be less than the lease duration.")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "How often candidates try to acquire, and the leader to renew, the lease.")

	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "host:port serving Prometheus metrics at /metrics. \"0\" disables it.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "host:port serving /healthz and /readyz. \"0\" disables it.")
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
	if o.ProfileChangeDelay < 0 {
		return fmt.Errorf("--profile-change-delay must not be negative, got %s", o.ProfileChangeDelay)
	}
	if _, err := o.RolloutDefaults(); err != nil {
		return err
	}
	if o.ReferenceGrantRecheck < 0 {
		return fmt.Errorf("--reference-grant-recheck must not be negative, got %v", o.ReferenceGrantRecheck)
	}
	if o.WatchSecrets {
		if _, _, err := o.secretDigestKeyName(func(string) ([]byte, error) { return nil, nil }); err != nil {
			return err
		}
	}
	switch o.DeploymentWrites {
	case deploymentWritesAuto, deploymentWritesUpdate, deploymentWritesPatch:
	default:
		return fmt.Errorf("--deployment-writes must be auto, update or patch, got %q", o.DeploymentWrites)
	}
	if o.MaxMovingSessions < 0 || o.MaxMovesPerMinute < 0 {
		return fmt.Errorf("--max-moving-sessions and --max-moves-per-minute must not be negative (0 is no limit), got %d and %d",
			o.MaxMovingSessions, o.MaxMovesPerMinute)
	}
	if o.RevisionHistoryLimit < 0 {
		return fmt.Errorf("--revision-history-limit must not be negative, got %d", o.RevisionHistoryLimit)
	}
	if o.LeaderElect {
		if err := o.validateLeaderElection(); err != nil {
			return err
		}
	}
	for _, a := range []struct{ flag, addr string }{
		{"--metrics-bind-address", o.MetricsBindAddress},
		{"--health-probe-bind-address", o.HealthProbeBindAddress},
	} {
		if err := validateBindAddress(a.addr); err != nil {
			return fmt.Errorf("%s: %w", a.flag, err)
		}
	}
	if o.MetricsBindAddress != "0" && o.MetricsBindAddress == o.HealthProbeBindAddress {
		if _, port, _ := net.SplitHostPort(o.MetricsBindAddress); port != "0" {
			return fmt.Errorf("--metrics-bind-address and --health-probe-bind-address must differ, both are %q", o.MetricsBindAddress)
		}
	}
	return nil
}

// RolloutDefaults returns the rollout policy the --rollout-* flags set.
func (o *Options) RolloutDefaults() (rollout.Policy, error) {
	p := rollout.DefaultPolicy()
	var err error
	if p.MaxRolling, err = rollout.ParseIntOrPercent(o.RolloutMaxRolling); err != nil {
		return p, fmt.Errorf("--rollout-max-rolling: %w", err)
	}
	if p.MaxRolling.String() == "0" || p.MaxRolling.String() == "0%" {
		return p, fmt.Errorf("--rollout-max-rolling must allow at least one session, got %q", o.RolloutMaxRolling)
	}
	if p.Canary, err = rollout.ParseIntOrPercent(o.RolloutCanary); err != nil {
		return p, fmt.Errorf("--rollout-canary: %w", err)
	}
	if o.RolloutMaxFailed != "" {
		maxFailed, err := rollout.ParseIntOrPercent(o.RolloutMaxFailed)
		if err != nil {
			return p, fmt.Errorf("--rollout-max-failed: %w", err)
		}
		p.MaxFailed = &maxFailed
	}
	if p.MaxDefer, err = rollout.ParseMaxDefer(o.RolloutMaxDefer); err != nil {
		return p, fmt.Errorf("--rollout-max-defer: %w", err)
	}
	return p, nil
}

func (o *Options) validateLeaderElection() error {
	if errs := validation.IsDNS1123Subdomain(o.LeaderElectionID); len(errs) > 0 {
		return fmt.Errorf("--leader-election-id %q is not a valid Lease name: %s", o.LeaderElectionID, errs[0])
	}
	if ns := o.LeaderElectionNamespace; ns != "" {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("--leader-election-namespace %q is not a valid namespace: %s", ns, errs[0])
		}
	}
	if o.LeaseDuration <= 0 || o.RenewDeadline <= 0 || o.RetryPeriod <= 0 {
		return fmt.Errorf("--leader-elect-lease-duration, --leader-elect-renew-deadline and --leader-elect-retry-period must be positive")
	}
	// The leader must give up before a standby may take over, or both would
	// run for a while; and it must get more than one jittered retry in
	// before it gives up.
	if o.LeaseDuration <= o.RenewDeadline {
		return fmt.Errorf("--leader-elect-lease-duration (%s) must be greater than --leader-elect-renew-deadline (%s)", o.LeaseDuration, o.RenewDeadline)
	}
	if minDeadline := time.Duration(leaderelection.JitterFactor * float64(o.RetryPeriod)); o.RenewDeadline <= minDeadline {
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be greater than %g times --leader-elect-retry-period (%s)", o.RenewDeadline, leaderelection.JitterFactor, o.RetryPeriod)
	}
	return nil
}

// validateBindAddress accepts "0" (disabled) or host:port with an empty,
// IP or name host.
func validateBindAddress(addr string) error {
	if addr == "0" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port, or \"0\" to disable: %w", err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("invalid port %q", port)
	}
	return nil
}

// secretDigestKeyName resolves --secret-digest-key: NAMESPACE/NAME, or NAME
// in the controller's own namespace: in a cluster the pod's, where its Role
// is; outside one, where it keeps its Lease (--leader-election-namespace),
// else --namespace, else "default".
func (o *Options) secretDigestKeyName(readFile func(string) ([]byte, error)) (namespace, name string, err error) {
	namespace, name, found := strings.Cut(o.SecretDigestKey, "/")
	if !found {
		namespace, name = cmp.Or(o.podNamespace(readFile), o.LeaderElectionNamespace, o.Namespace, metav1.NamespaceDefault), o.SecretDigestKey
	}
	// --namespace may be a $(POD_NAMESPACE) the kubelet expands: only the
	// flag's own namespace is checked here, the API server checks the rest.
	if errs := validation.IsDNS1123Label(namespace); found && len(errs) > 0 {
		return "", "", fmt.Errorf("--secret-digest-key %q: namespace %q: %s", o.SecretDigestKey, namespace, errs[0])
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", "", fmt.Errorf("--secret-digest-key %q: Secret name %q: %s", o.SecretDigestKey, name, errs[0])
	}
	return namespace, name, nil
}
