package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
// in its group and names, and, for the twins of the shapes the API server's
// write cost is attributed to, in one part of its schema. The plain twin has
// the same schema, validation rules and status subresource: a status write to
// it costs the API server what the controller's status write costs, and the
// controller never sees it. They let a plain loop repeat the controller's
// exact write pattern without the controller.
const twinGroup = "bench.example.com"

// twinKind is a twin CRD: the ceiling variant that writes its status, its
// names, and how its schema differs from GameSession's.
type twinKind struct {
	variant        string
	resource, kind string
	shape          func(schema map[string]interface{}) error
}

var twinKinds = []twinKind{
	{variant: ceilingStatus, resource: "benchsessions", kind: "BenchSession"},
	// The pod template without a structural schema: the API server keeps
	// it as it comes, and prunes, validates and tracks nothing in it.
	{variant: ceilingStatusSchemaless, resource: "schemalesssessions", kind: "SchemalessSession", shape: templateWithoutSchema},
	// No CEL rule anywhere.
	{variant: ceilingStatusNoCEL, resource: "nocelsessions", kind: "NoCELSession", shape: func(schema map[string]interface{}) error {
		withoutCEL(schema)
		return nil
	}},
	// Both.
	{variant: ceilingStatusBare, resource: "baresessions", kind: "BareSession", shape: func(schema map[string]interface{}) error {
		withoutCEL(schema)
		return templateWithoutSchema(schema)
	}},
}

func twinKindOf(variant string) (twinKind, bool) {
	for _, k := range twinKinds {
		if k.variant == variant || variant == ceilingPatchStatus && k.variant == ceilingStatus {
			return k, true
		}
	}
	return twinKind{}, false
}

// twinStatusResources are the status subresources of every twin kind.
func twinStatusResources() []string {
	var out []string
	for _, k := range twinKinds {
		out = append(out, k.resource+"/status")
	}
	return out
}

func (k twinKind) gvr() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: twinGroup, Version: "v1", Resource: k.resource}
}

// templateWithoutSchema replaces the schema of spec.template by an object
// whose fields the API server keeps unknown, and drops the rules of spec
// that read into it (CEL cannot reach unknown fields).
func templateWithoutSchema(schema map[string]interface{}) error {
	spec, ok, err := unstructured.NestedMap(schema, "properties", "spec")
	if err != nil || !ok {
		return fmt.Errorf("the GameSession schema has no spec: %v", err)
	}
	if err := unstructured.SetNestedMap(spec, map[string]interface{}{
		"type": "object", "x-kubernetes-preserve-unknown-fields": true,
	}, "properties", "template"); err != nil {
		return err
	}
	rules, _, _ := unstructured.NestedSlice(spec, "x-kubernetes-validations")
	var kept []interface{}
	for _, r := range rules {
		if rule, _ := r.(map[string]interface{})["rule"].(string); !strings.Contains(rule, "template") {
			kept = append(kept, r)
		}
	}
	if len(kept) == 0 {
		delete(spec, "x-kubernetes-validations")
	} else {
		spec["x-kubernetes-validations"] = kept
	}
	return unstructured.SetNestedMap(schema, spec, "properties", "spec")
}

// withoutCEL removes every x-kubernetes-validations of the schema.
func withoutCEL(node interface{}) {
	switch n := node.(type) {
	case map[string]interface{}:
		delete(n, "x-kubernetes-validations")
		for _, v := range n {
			withoutCEL(v)
		}
	case []interface{}:
		for _, v := range n {
			withoutCEL(v)
		}
	}
}

func (e *env) installTwinCRD(ctx context.Context, k twinKind) error {
	objs, err := manifests.DecodeFiles(manifests.CRDPaths(e.root)[0])
	if err != nil {
		return err
	}
	crd := objs[0]
	crd.SetName(k.resource + "." + twinGroup)
	if err := unstructured.SetNestedField(crd.Object, twinGroup, "spec", "group"); err != nil {
		return err
	}
	if err := unstructured.SetNestedMap(crd.Object, map[string]interface{}{
		"kind": k.kind, "listKind": k.kind + "List", "plural": k.resource, "singular": strings.ToLower(k.kind),
	}, "spec", "names"); err != nil {
		return err
	}
	delete(crd.Object["spec"].(map[string]interface{}), "shortNames")
	if k.shape != nil {
		versions, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
		if err != nil || len(versions) != 1 {
			return fmt.Errorf("the GameSession CRD has %d versions, want 1: %v", len(versions), err)
		}
		schema, _, err := unstructured.NestedMap(versions[0].(map[string]interface{}), "schema", "openAPIV3Schema")
		if err != nil {
			return err
		}
		if err := k.shape(schema); err != nil {
			return err
		}
		if err := unstructured.SetNestedMap(versions[0].(map[string]interface{}), schema, "schema", "openAPIV3Schema"); err != nil {
			return err
		}
		if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
			return err
		}
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
		_, err := client.Resource(k.gvr()).Namespace(ceilingNS).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("twin CRD %s not served: %w", k.resource, err)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// copyTwins copies the sessions whose names start with prefix, status
// included, into twins of kind k in the ceiling namespace.
func (e *env) copyTwins(ctx context.Context, prefix string, k twinKind) error {
	if err := e.installTwinCRD(ctx, k); err != nil {
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
	twins := client.Resource(k.gvr()).Namespace(ceilingNS)
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
			"apiVersion": twinGroup + "/v1", "kind": k.kind,
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

// listTwins returns the first n twins of kind k by name, as the ceiling loop
// pairs them with the Deployments of the same name.
func (e *env) listTwins(ctx context.Context, n int, k twinKind) ([]unstructured.Unstructured, error) {
	client, err := dynamic.NewForConfig(e.adminCfg)
	if err != nil {
		return nil, err
	}
	list, err := client.Resource(k.gvr()).Namespace(ceilingNS).List(ctx, metav1.ListOptions{})
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

// statusProfileSeconds is how long the kube-apiserver is profiled under each
// status-only loop.
const statusProfileSeconds = 15

// profileStatusWrites profiles the kube-apiserver under the status-only loop
// of each status variant measured, repeated for statusProfileSeconds: where
// the API server spends a status write of each twin's shape.
func (e *env) profileStatusWrites(ctx context.Context, n int) error {
	if err := os.MkdirAll(e.cfg.profileDir, 0o755); err != nil {
		return err
	}
	for _, v := range e.cfg.variants {
		if k, ok := twinKindOf(v); !ok || v == ceilingPatchStatus || k.variant != v {
			continue
		}
		path := filepath.Join(e.cfg.profileDir, "kube-apiserver-"+v+".pb.gz")
		done := make(chan error, 1)
		go func() { done <- e.apiServerProfile(ctx, path, statusProfileSeconds) }()
		loops := 0
		for profiling := true; profiling; {
			if _, err := e.ceiling(ctx, n, v); err != nil {
				return err
			}
			loops++
			select {
			case err := <-done:
				if err != nil {
					return err
				}
				profiling = false
			default:
			}
		}
		logf("kube-apiserver under %d loops of %s: go tool pprof -top %s", loops, v, path)
	}
	return nil
}
