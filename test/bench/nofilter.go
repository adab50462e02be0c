package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/example/gamesession-controller/pkg/controller"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
	gameinformers "github.com/example/gamesession-controller/pkg/generated/informers/externalversions"
)

// runNoFilterInformer is the memory baseline, run as a process of its own:
// the controller's informers, the same managedFields stripping, but one
// ConfigMap informer with no label selector in place of its two filtered ones
// (profiles and revisions), as a controller that filters in its event
// handlers instead of in the list and watch would have. It prints its memory
// as JSON on stdout.
func runNoFilterInformer(kubeconfig string, settle time.Duration) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	games, err := clientset.NewForConfig(cfg)
	if err != nil {
		return err
	}
	stripManagedFields := func(obj interface{}) (interface{}, error) {
		if a, err := meta.Accessor(obj); err == nil {
			a.SetManagedFields(nil)
		}
		return obj, nil
	}
	sessionFactory := gameinformers.NewSharedInformerFactoryWithOptions(games, 0, gameinformers.WithTransform(stripManagedFields))
	configMapFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0, kubeinformers.WithTransform(stripManagedFields))
	deploymentFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0,
		kubeinformers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = controller.ManagedDeploymentSelector() }),
		kubeinformers.WithTransform(stripManagedFields))
	sessions := sessionFactory.Games().V1().GameSessions().Informer()
	configMaps := configMapFactory.Core().V1().ConfigMaps().Informer()
	deployments := deploymentFactory.Apps().V1().Deployments().Informer()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sessionFactory.Start(ctx.Done())
	configMapFactory.Start(ctx.Done())
	deploymentFactory.Start(ctx.Done())
	defer func() {
		cancel()
		sessionFactory.Shutdown()
		configMapFactory.Shutdown()
		deploymentFactory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), sessions.HasSynced, configMaps.HasSynced, deployments.HasSynced) {
		return fmt.Errorf("caches did not sync")
	}
	time.Sleep(settle)

	ms, err := readMem(os.Getpid())
	if err != nil {
		return err
	}
	// The same reading as the controller's, where it can be done directly:
	// heap allocated right after a GC.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	runtime.GC()
	runtime.ReadMemStats(&after)
	return json.NewEncoder(os.Stdout).Encode(memSample{
		RSS: ms.RSS, HWM: ms.HWM,
		HeapInuse:  before.HeapInuse,
		LiveHeap:   after.HeapAlloc,
		GCGoal:     after.NextGC,
		GCs:        int(after.NumGC),
		ConfigMaps: len(configMaps.GetStore().ListKeys()),
	})
}
