package app

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	kubeinformers "k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"

	"github.com/example/gamesession-controller/pkg/controller"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
	gameinformers "github.com/example/gamesession-controller/pkg/generated/informers/externalversions"
	"github.com/example/gamesession-controller/pkg/metrics"
)

// Run runs the controller until ctx is cancelled, then stops its workers and
// informers and returns. It returns an error if the controller cannot start.
//
// With leader election, Run serves metrics and health at once but starts the
// informers and workers only once it holds the lease, and returns an error if
// it loses the lease, so that the process exits and a standby takes over.
// Nothing in Run exits the process: tests run it in-process, several times.
func Run(ctx context.Context, o *Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	cfg, err := o.restConfig()
	if err != nil {
		return err
	}
	kubeClient, err := kubernetes.NewForConfig(protobufConfig(cfg))
	if err != nil {
		return fmt.Errorf("building the Kubernetes client: %w", err)
	}
	gameClient, err := clientset.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building the GameSession client: %w", err)
	}

	var watchdog *leaderelection.HealthzAdaptor
	if o.LeaderElect {
		// A leader whose renew loop is wedged, and so never notices that it
		// lost the lease, fails /healthz a lease duration after the lease
		// expired, and the kubelet restarts it.
		watchdog = leaderelection.NewLeaderHealthzAdaptor(o.LeaseDuration)
	}
	health := newHealthChecker(o.Workers, watchdog)
	if health.apiServer, err = newAPIServerCheck(klog.FromContext(ctx), cfg); err != nil {
		return err
	}
	// The informers' own clients, whose requests wait out an API server
	// outage rather than make the reflectors back off through it (see
	// apiServerRecovery). The workers' writes keep failing fast.
	recovery := newAPIServerRecovery(health.apiServer, ctx.Done())
	informerKubeClient, err := kubernetes.NewForConfig(recovery.config(protobufConfig(cfg)))
	if err != nil {
		return fmt.Errorf("building the Kubernetes client: %w", err)
	}
	informerGameClient, err := clientset.NewForConfig(recovery.config(cfg))
	if err != nil {
		return fmt.Errorf("building the GameSession client: %w", err)
	}
	informerDynamicClient, err := dynamic.NewForConfig(recovery.config(cfg))
	if err != nil {
		return fmt.Errorf("building the dynamic client: %w", err)
	}
	informerClients := informerClients{kube: informerKubeClient, game: informerGameClient, dynamic: informerDynamicClient}
	sessions := metrics.NewSessionCollector()
	controllerMetrics := metrics.NewControllerMetrics()
	registry, err := metrics.NewRegistry(append(controllerMetrics.Collectors(), sessions)...)
	if err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	metricsMux := http.NewServeMux()
	metricsMux.Handle("/metrics", metrics.Handler(registry))

	// Served before the election, so a standby is probed and scraped too.
	// The deferred stops run after the controller has stopped, so the last
	// scrape can still see the shutdown.
	stopMetrics, err := serve(ctx, "metrics", o.MetricsBindAddress, metricsMux)
	if err != nil {
		return err
	}
	defer stopMetrics()
	stopHealth, err := serve(ctx, "health", o.HealthProbeBindAddress, health.handler())
	if err != nil {
		return err
	}
	defer stopHealth()

	run := func(ctx context.Context) error {
		return runController(ctx, o, kubeClient, gameClient, informerClients, health, sessions, controllerMetrics)
	}
	if !o.LeaderElect {
		return run(ctx)
	}
	return runWithLeaderElection(ctx, o, cfg, health, watchdog, run)
}

// runController builds the informers and the controller, runs them until ctx
// is cancelled, and waits for them to stop. With leader election it runs for
// the one term this process leads: losing the lease ends the process rather
// than reusing caches and a queue built for the old term.
func runController(ctx context.Context, o *Options, kubeClient kubernetes.Interface, gameClient clientset.Interface, informers informerClients,
	health *healthChecker, sessions *metrics.SessionCollector, controllerMetrics *metrics.ControllerMetrics) error {
	logger := klog.FromContext(ctx)

	// One factory per filter: a factory applies its list options to every
	// informer it makes, so the profile, revision and Deployment filters
	// cannot share one. GameSessions and ProfileRollouts share the
	// unfiltered one; Deployments and their ReplicaSets the managed-by one.
	sessionFactory := gameinformers.NewSharedInformerFactoryWithOptions(informers.game, o.ResyncPeriod,
		gameinformers.WithNamespace(o.Namespace),
		gameinformers.WithTransform(dropManagedFields))
	profileFactory := kubeinformers.NewSharedInformerFactoryWithOptions(informers.kube, o.ResyncPeriod,
		kubeinformers.WithNamespace(o.Namespace),
		kubeinformers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = o.ProfileSelector }),
		kubeinformers.WithTransform(dropManagedFields))
	revisionFactory := kubeinformers.NewSharedInformerFactoryWithOptions(informers.kube, o.ResyncPeriod,
		kubeinformers.WithNamespace(o.Namespace),
		kubeinformers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = controller.RevisionSelector() }),
		kubeinformers.WithTransform(dropRevisionData))
	deploymentFactory := kubeinformers.NewSharedInformerFactoryWithOptions(informers.kube, o.ResyncPeriod,
		kubeinformers.WithNamespace(o.Namespace),
		kubeinformers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = controller.ManagedDeploymentSelector() }),
		kubeinformers.WithTransform(slimManaged))

	rolloutDefaults, err := o.RolloutDefaults()
	if err != nil {
		return err
	}
	// Grants only matter to a cluster-wide controller: one of a single
	// namespace sees no other namespace's profiles.
	var grantFactory dynamicinformer.DynamicSharedInformerFactory
	var grants cache.SharedIndexInformer
	if o.Namespace == "" {
		gvr, found, err := referenceGrantResource(ctx, kubeClient.Discovery())
		if err != nil {
			return err
		}
		if found {
			if grantFactory, grants, err = newGrantInformer(informers.dynamic, o.ResyncPeriod, gvr); err != nil {
				return err
			}
			logger.Info("Profiles of other namespaces are permitted by ReferenceGrants", "resource", gvr.String())
		} else {
			logger.Info("The cluster serves no ReferenceGrant API: GameSessions may use profiles of their own namespace only, until it does",
				"recheck", o.ReferenceGrantRecheck)
		}
	}
	// Labelled Secrets, each replaced in the cache by a keyed digest of its
	// data (controller.SecretDigester): the cache never holds Secret data.
	var secretFactory, digestKeyFactory kubeinformers.SharedInformerFactory
	var secretInformer, digestKeyInformer coreinformers.SecretInformer
	var digestKeys controller.SecretDigestKeys
	var digestKeyNamespace, digestKeyName string
	if o.WatchSecrets {
		namespace, name, err := o.secretDigestKeyName(os.ReadFile)
		if err != nil {
			return err
		}
		keys, err := waitForSecretDigestKey(ctx, kubeClient, namespace, name)
		if err != nil {
			if ctx.Err() != nil {
				logger.Info("Stopped before the Secret digest key was read")
				return nil
			}
			return err
		}
		secretFactory = kubeinformers.NewSharedInformerFactoryWithOptions(informers.kube, o.ResyncPeriod,
			kubeinformers.WithNamespace(o.Namespace),
			kubeinformers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = controller.SecretSelector() }),
			kubeinformers.WithTransform(keys.Digester()))
		secretInformer = secretFactory.Core().V1().Secrets()
		// The key's own Secret, by name, holding its key's fingerprint
		// only: the controller says when it is gone (digestkey.go).
		digestKeyFactory = kubeinformers.NewSharedInformerFactoryWithOptions(informers.kube, o.ResyncPeriod,
			kubeinformers.WithNamespace(namespace),
			kubeinformers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.FieldSelector = controller.DigestKeySelector(name) }),
			kubeinformers.WithTransform(controller.DigestKeyStandIn))
		digestKeyInformer = digestKeyFactory.Core().V1().Secrets()
		digestKeys, digestKeyNamespace, digestKeyName = keys, namespace, name
	}
	// Labelled session-config ConfigMaps, each a digest of its data in the
	// cache (controller.SessionConfigDigester); a factory of their own, as
	// the profile factory's label filter is another.
	var sessionConfigFactory kubeinformers.SharedInformerFactory
	var sessionConfigInformer coreinformers.ConfigMapInformer
	if o.WatchSessionConfigs {
		sessionConfigFactory = kubeinformers.NewSharedInformerFactoryWithOptions(informers.kube, o.ResyncPeriod,
			kubeinformers.WithNamespace(o.Namespace),
			kubeinformers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = controller.SessionConfigSelector() }),
			kubeinformers.WithTransform(controller.SessionConfigDigester()))
		sessionConfigInformer = sessionConfigFactory.Core().V1().ConfigMaps()
	}
	// Live delivery: the sessions' live profiles and the pods of live
	// sessions, each from a factory of its own label filter, slimmed.
	var liveProfileFactory, livePodFactory kubeinformers.SharedInformerFactory
	var liveProfileInformer coreinformers.ConfigMapInformer
	var livePodInformer coreinformers.PodInformer
	if o.LiveDelivery {
		liveProfileFactory = kubeinformers.NewSharedInformerFactoryWithOptions(informers.kube, o.ResyncPeriod,
			kubeinformers.WithNamespace(o.Namespace),
			kubeinformers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = controller.LiveProfileSelector() }),
			kubeinformers.WithTransform(controller.SlimLiveProfile))
		liveProfileInformer = liveProfileFactory.Core().V1().ConfigMaps()
		livePodFactory = kubeinformers.NewSharedInformerFactoryWithOptions(informers.kube, o.ResyncPeriod,
			kubeinformers.WithNamespace(o.Namespace),
			kubeinformers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = controller.LivePodSelector() }),
			kubeinformers.WithTransform(controller.SlimLivePod))
		livePodInformer = livePodFactory.Core().V1().Pods()
	}
	patchDeployments, err := deploymentWritesFor(ctx, o.DeploymentWrites, kubeClient.Discovery())
	if err != nil {
		return err
	}
	sessionInformer := sessionFactory.Games().V1().GameSessions()
	c, err := controller.NewController(ctx, kubeClient, gameClient,
		controller.Informers{
			Sessions:           sessionInformer,
			Rollouts:           sessionFactory.Games().V1().ProfileRollouts(),
			Profiles:           profileFactory.Core().V1().ConfigMaps(),
			Revisions:          revisionFactory.Core().V1().ConfigMaps(),
			Deployments:        deploymentFactory.Apps().V1().Deployments(),
			ReplicaSets:        deploymentFactory.Apps().V1().ReplicaSets(),
			Grants:             grants,
			Secrets:            secretInformer,
			SecretDigestKeys:   digestKeys,
			DigestKeySecret:    digestKeyInformer,
			DigestKeyNamespace: digestKeyNamespace,
			DigestKeyName:      digestKeyName,
			SessionConfigs:     sessionConfigInformer,
			LiveProfiles:       liveProfileInformer,
			LivePods:           livePodInformer,
		},
		controller.Options{
			ProfileSelector:      o.ProfileSelector,
			ProfileChangeDelay:   o.ProfileChangeDelay,
			Metrics:              controllerMetrics,
			RolloutDefaults:      &rolloutDefaults,
			RevisionHistoryLimit: o.RevisionHistoryLimit,
			MaxMovingSessions:    o.MaxMovingSessions,
			MaxMovesPerMinute:    o.MaxMovesPerMinute,
			Namespace:            o.Namespace,
			PatchDeployments:     patchDeployments,
		})
	if err != nil {
		return err
	}
	health.setController(c)
	defer health.setController(nil)
	sessions.SetSource(sessionInformer.Lister(), c.HasSynced)
	defer sessions.SetSource(nil, nil)

	logger.Info("Starting informers", "version", Version, "namespace", o.Namespace, "profileSelector", o.ProfileSelector)
	sessionFactory.Start(ctx.Done())
	profileFactory.Start(ctx.Done())
	revisionFactory.Start(ctx.Done())
	deploymentFactory.Start(ctx.Done())
	if secretFactory != nil {
		secretFactory.Start(ctx.Done())
		defer secretFactory.Shutdown()
		digestKeyFactory.Start(ctx.Done())
		defer digestKeyFactory.Shutdown()
	}
	for _, f := range []kubeinformers.SharedInformerFactory{liveProfileFactory, livePodFactory} {
		if f != nil {
			f.Start(ctx.Done())
			defer f.Shutdown()
		}
	}
	if sessionConfigFactory != nil {
		sessionConfigFactory.Start(ctx.Done())
		defer sessionConfigFactory.Shutdown()
	}
	if grantFactory != nil {
		grantFactory.Start(ctx.Done())
		defer grantFactory.Shutdown()
	} else if o.Namespace == "" && o.ReferenceGrantRecheck > 0 {
		// Stopped, and waited for, before the other informers.
		lateCtx, cancelLate := context.WithCancel(ctx)
		var late sync.WaitGroup
		late.Go(func() {
			watchForReferenceGrants(lateCtx, o.ReferenceGrantRecheck, kubeClient.Discovery(), informers.dynamic, o.ResyncPeriod, c)
		})
		defer late.Wait()
		defer cancelLate()
	}
	// Shutdown waits for the informer goroutines, so Run leaves nothing behind.
	defer deploymentFactory.Shutdown()
	defer revisionFactory.Shutdown()
	defer profileFactory.Shutdown()
	defer sessionFactory.Shutdown()

	if err := c.Run(ctx, o.Workers); err != nil {
		if ctx.Err() != nil {
			// Stopped before the caches synced: a stop, not a failure.
			logger.Info("Stopped before the caches synced")
			return nil
		}
		return err
	}
	return nil
}

// referenceGrantResource finds the ReferenceGrant version the API server
// serves, the preferred first. found is false when it serves none (Gateway
// API's CRDs are an optional install). Discovery errors other than "not
// served" are retried for a while: a controller that started without grants
// because of a transient error would refuse every cross-namespace profile
// until it looked again.
func referenceGrantResource(ctx context.Context, client discovery.DiscoveryInterface) (gvr schema.GroupVersionResource, found bool, err error) {
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 6, Cap: 10 * time.Second}
	err = wait.ExponentialBackoffWithContext(ctx, backoff, func(context.Context) (bool, error) {
		var lookErr error
		gvr, found, lookErr = lookForReferenceGrants(client)
		if lookErr != nil {
			klog.FromContext(ctx).Info("Looking for the ReferenceGrant API", "err", lookErr)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return gvr, false, fmt.Errorf("looking for the ReferenceGrant API: %w", err)
	}
	return gvr, found, nil
}

// lookForReferenceGrants asks discovery once for each ReferenceGrant version,
// the preferred first.
func lookForReferenceGrants(client discovery.DiscoveryInterface) (schema.GroupVersionResource, bool, error) {
	var lastErr error
	for _, candidate := range controller.ReferenceGrantVersions {
		list, err := client.ServerResourcesForGroupVersion(candidate.GroupVersion().String())
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			lastErr = err
			continue
		}
		for _, r := range list.APIResources {
			if r.Name == candidate.Resource {
				return candidate, true, nil
			}
		}
	}
	return schema.GroupVersionResource{}, false, lastErr
}

// newGrantInformer is the dynamic informer of ReferenceGrants, with no label
// filter and trimmed to their spec.
func newGrantInformer(client dynamic.Interface, resync time.Duration, gvr schema.GroupVersionResource) (dynamicinformer.DynamicSharedInformerFactory, cache.SharedIndexInformer, error) {
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, resync, metav1.NamespaceAll, nil)
	informer := factory.ForResource(gvr).Informer()
	if err := informer.SetTransform(controller.SlimReferenceGrant); err != nil {
		return nil, nil, err
	}
	return factory, informer, nil
}

// watchForReferenceGrants looks for the ReferenceGrant API every interval
// until the cluster serves it, then starts the grant informer and hands it
// to the controller: a Gateway API install after the controller started
// needs no restart. It returns when ctx ends, its informer stopped.
func watchForReferenceGrants(ctx context.Context, interval time.Duration, client discovery.DiscoveryInterface,
	dyn dynamic.Interface, resync time.Duration, c *controller.Controller) {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		gvr, found, err := lookForReferenceGrants(client)
		if err != nil {
			logger.V(2).Info("Looking for the ReferenceGrant API", "err", err)
		}
		if !found {
			continue
		}
		logger.Info("The cluster serves the ReferenceGrant API now", "resource", gvr.String())
		factory, informer, err := newGrantInformer(dyn, resync, gvr)
		if err != nil {
			logger.Error(err, "Starting the ReferenceGrant informer")
			return
		}
		factory.Start(ctx.Done())
		defer factory.Shutdown()
		if _, err := c.EnableGrants(ctx, informer); err != nil {
			logger.Error(err, "Reading ReferenceGrants")
		}
		<-ctx.Done()
		return
	}
}

// informerClients are the clients the informers list and watch with.
type informerClients struct {
	kube    kubernetes.Interface
	game    clientset.Interface
	dynamic dynamic.Interface
}

func (o *Options) restConfig() (*rest.Config, error) {
	var cfg *rest.Config
	if o.RESTConfig != nil {
		cfg = rest.CopyConfig(o.RESTConfig)
	} else {
		var err error
		// With neither flag set this falls back to the in-cluster config.
		cfg, err = clientcmd.BuildConfigFromFlags(o.Master, o.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("building the client configuration: %w", err)
		}
	}
	cfg.QPS = float32(o.KubeAPIQPS)
	cfg.Burst = o.KubeAPIBurst
	cfg.UserAgent = rest.DefaultKubernetesUserAgent() + " " + controller.Name
	return cfg, nil
}

// dropManagedFields strips managedFields from objects before they enter an
// informer cache: the controller never reads them, and they are often the
// largest part of an object.
func dropManagedFields(obj interface{}) (interface{}, error) {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}

// dropRevisionData keeps a revision's metadata only: the controller reads
// which revisions exist, never what they hold (that is the profile's), so a
// profile's history costs the cache a few hundred bytes per revision, not its
// content again.
func dropRevisionData(obj interface{}) (interface{}, error) {
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		cm.Data, cm.BinaryData = nil, nil
	}
	return dropManagedFields(obj)
}

// slimManaged is the transform of the managed-object factory: its
// ReplicaSets (which carry the Deployments' pod-template labels, and so the
// managed-by label) are slimmed to what says which revision their pods
// mount; its Deployments lose their managedFields.
func slimManaged(obj interface{}) (interface{}, error) {
	if _, ok := obj.(*appsv1.ReplicaSet); ok {
		return controller.SlimReplicaSet(obj)
	}
	return dropManagedFields(obj)
}

// protobufConfig returns cfg for clients of built-in types, which then
// speak protobuf, as kube-controller-manager's do: the API server encodes and
// decodes it at a fraction of JSON's cost, which matters when one profile
// edit makes thousands of writes and watch events. Custom resources have no
// protobuf encoding, so the GameSession client keeps cfg's JSON.
func protobufConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}
