package app

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/example/gamesession-controller/pkg/controller"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
	gameinformers "github.com/example/gamesession-controller/pkg/generated/informers/externalversions"
)

// Run runs the controller until ctx is cancelled, then stops its workers and
// informers and returns. It returns an error if the controller cannot start.
func Run(ctx context.Context, o *Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	cfg, err := o.restConfig()
	if err != nil {
		return err
	}
	kubeClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building the Kubernetes client: %w", err)
	}
	gameClient, err := clientset.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building the GameSession client: %w", err)
	}

	// One factory per filter: a factory applies its list options to every
	// informer it makes, so the ConfigMap and Deployment filters cannot share one.
	sessionFactory := gameinformers.NewSharedInformerFactoryWithOptions(gameClient, o.ResyncPeriod,
		gameinformers.WithNamespace(o.Namespace),
		gameinformers.WithTransform(dropManagedFields))
	profileFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kubeClient, o.ResyncPeriod,
		kubeinformers.WithNamespace(o.Namespace),
		kubeinformers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = o.ProfileSelector }),
		kubeinformers.WithTransform(dropManagedFields))
	deploymentFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kubeClient, o.ResyncPeriod,
		kubeinformers.WithNamespace(o.Namespace),
		kubeinformers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = controller.ManagedDeploymentSelector() }),
		kubeinformers.WithTransform(dropManagedFields))

	c, err := controller.NewController(ctx, kubeClient, gameClient,
		sessionFactory.Games().V1().GameSessions(),
		profileFactory.Core().V1().ConfigMaps(),
		deploymentFactory.Apps().V1().Deployments(),
		controller.Options{ProfileSelector: o.ProfileSelector})
	if err != nil {
		return err
	}

	logger.Info("Starting informers", "namespace", o.Namespace, "profileSelector", o.ProfileSelector)
	sessionFactory.Start(ctx.Done())
	profileFactory.Start(ctx.Done())
	deploymentFactory.Start(ctx.Done())
	// Shutdown waits for the informer goroutines, so Run leaves nothing behind.
	defer deploymentFactory.Shutdown()
	defer profileFactory.Shutdown()
	defer sessionFactory.Shutdown()

	return c.Run(ctx, o.Workers)
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
