package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/example/gamesession-controller/internal/manifests"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// Twins are copies of the sessions under a CRD that differs from GameSession
// only in its group and names: same schema, same validation rules, same
// status subresource. A status write to a twin costs the API server what the
// controller's status write costs, and the controller never sees it. They let
// a plain loop repeat the controller's exact write pattern without the
// controller.
const twinGroup = "bench.example.com"

var twinResource = schema.GroupVersionResource{Group: twinGroup, Version: "v1", Resource: "benchsessions"}

func (e *env) installTwinCRD(ctx context.Context) error {
	objs, err := manifests.DecodeFiles(manifests.CRDPaths(e.root)[0])
	if err != nil {
		return err
	}
	crd := objs[0]
	crd.SetName(twinResource.Resource + "." + twinGroup)
	if err := unstructured.SetNestedField(crd.Object, twinGroup, "spec", "group"); err != nil {
		return err
	}
	if err := unstructured.SetNestedMap(crd.Object, map[string]interface{}{
		"kind": "BenchSession", "listKind": "BenchSessionList", "plural": twinResource.Resource, "singular": "benchsession",
	}, "spec", "names"); err != nil {
		return err
	}
	applier, err := manifests.NewApplier(e.adminCfg)
	if err != nil {
		return err
	}
	if err := applier.Apply(ctx, "", crd); err != nil {
		return err
	}
	client, err := dynamic.NewForConfig(e.adminCfg)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := client.Resource(twinResource).Namespace(ceilingNS).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("twin CRD not served: %w", err)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// copyTwins copies the sessions whose names start with prefix, status
// included, into twins in the ceiling namespace.
func (e *env) copyTwins(ctx context.Context, prefix string) error {
	if err := e.installTwinCRD(ctx); err != nil {
		return err
	}
	client, err := dynamic.NewForConfig(e.adminCfg)
	if err != nil {
		return err
	}
	list, err := e.games.GamesV1().GameSessions(benchNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var src []*gamesv1.GameSession
	for i := range list.Items {
		if strings.HasPrefix(list.Items[i].Name, prefix) {
			src = append(src, &list.Items[i])
		}
	}
	twins := client.Resource(twinResource).Namespace(ceilingNS)
	return parallel(ctx, len(src), createWorkers, func(ctx context.Context, i int) error {
		s := src[i]
		spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s.Spec)
		if err != nil {
			return err
		}
		status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s.Status)
		if err != nil {
			return err
		}
		twin := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": twinGroup + "/v1", "kind": "BenchSession",
			"metadata": map[string]interface{}{"name": s.Name, "namespace": ceilingNS},
			"spec":     spec,
		}}
		created, err := twins.Create(ctx, twin, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		if err != nil {
			return err
		}
		created.Object["status"] = status
		_, err = twins.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
}

// listTwins returns the first n twins by name, as the ceiling loop pairs
// them with the Deployments of the same name.
func (e *env) listTwins(ctx context.Context, n int) ([]unstructured.Unstructured, error) {
	client, err := dynamic.NewForConfig(e.adminCfg)
	if err != nil {
		return nil, err
	}
	list, err := client.Resource(twinResource).Namespace(ceilingNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	items := list.Items
	sort.Slice(items, func(i, j int) bool { return items[i].GetName() < items[j].GetName() })
	if len(items) < n {
		return nil, fmt.Errorf("%d twins, want %d", len(items), n)
	}
	for i := range items[:n] {
		items[i].SetManagedFields(nil) // as in the controller's cache
	}
	return items[:n], nil
}

// withProfileHash returns a copy of twin whose status says hash is rolled
// out, as the controller's status write after a fan-out does.
func withProfileHash(twin *unstructured.Unstructured, hash string) *unstructured.Unstructured {
	t := twin.DeepCopy()
	_ = unstructured.SetNestedField(t.Object, hash, "status", "profileHash")
	conditions, _, _ := unstructured.NestedSlice(t.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]interface{}); ok && m["type"] == gamesv1.ConditionProfileResolved {
			m["message"] = fmt.Sprintf("Profile ConfigMap is rolled into the Deployment (hash %s)", hash)
		}
	}
	_ = unstructured.SetNestedSlice(t.Object, conditions, "status", "conditions")
	return t
}
