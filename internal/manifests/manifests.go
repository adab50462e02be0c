package manifests

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// CRDFiles are the project's CustomResourceDefinitions, relative to the
// repository root, in the order they are installed.
var CRDFiles = []string{
	"artifacts/crd/games.example.com_gamesessions.yaml",
	"artifacts/crd/games.example.com_profilerollouts.yaml",
}

// CRDPaths returns CRDFiles under root, the repository's root directory.
func CRDPaths(root string) []string {
	paths := make([]string, len(CRDFiles))
	for i, f := range CRDFiles {
		paths[i] = filepath.Join(root, f)
	}
	return paths
}

// FieldManager is the server-side apply field manager of applied manifests.
const FieldManager = "gamesession-manifests"

// Decode reads every object of a multi-document YAML stream. Empty documents
// are skipped.
func Decode(r io.Reader) ([]*unstructured.Unstructured, error) {
	decoder := utilyaml.NewYAMLOrJSONDecoder(bufio.NewReader(r), 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

// DecodeFiles decodes every object of the given YAML files, in order.
func DecodeFiles(paths ...string) ([]*unstructured.Unstructured, error) {
	var all []*unstructured.Unstructured
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		objs, err := Decode(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		all = append(all, objs...)
	}
	return all, nil
}

// Applier server-side-applies objects, mapping kinds to resources through
// discovery.
type Applier struct {
	client dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
	// DryRun makes the API server validate and admit without persisting.
	DryRun bool
}

// NewApplier returns an Applier for the cluster of cfg.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{client: client, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// Apply applies objs in order. Namespaced objects without a namespace go to
// defaultNamespace. A kind the API server does not know yet (a custom resource
// whose CRD was applied a moment ago) is retried after a discovery refresh.
func (a *Applier) Apply(ctx context.Context, defaultNamespace string, objs ...*unstructured.Unstructured) error {
	for _, obj := range objs {
		if err := a.applyOne(ctx, defaultNamespace, obj); err != nil {
			return fmt.Errorf("applying %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// ApplyFiles decodes and applies YAML files.
func (a *Applier) ApplyFiles(ctx context.Context, defaultNamespace string, paths ...string) error {
	objs, err := DecodeFiles(paths...)
	if err != nil {
		return err
	}
	return a.Apply(ctx, defaultNamespace, objs...)
}

func (a *Applier) applyOne(ctx context.Context, defaultNamespace string, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	var mapping *meta.RESTMapping
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var err error
		mapping, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			a.mapper.Reset()
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("no resource for %s: %w", gvk, err)
	}
	var resource dynamic.ResourceInterface = a.client.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = defaultNamespace
		}
		resource = a.client.Resource(mapping.Resource).Namespace(ns)
	}
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	if a.DryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = resource.Apply(ctx, obj.GetName(), obj, opts)
	return err
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs applies the CRDs in the given files and waits until the API
// server serves them (condition Established).
func InstallCRDs(ctx context.Context, cfg *rest.Config, paths ...string) error {
	applier, err := NewApplier(cfg)
	if err != nil {
		return err
	}
	objs, err := DecodeFiles(paths...)
	if err != nil {
		return err
	}
	if err := applier.Apply(ctx, "", objs...); err != nil {
		return err
	}
	for _, obj := range objs {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			crd, err := applier.client.Resource(crdResource).Get(ctx, obj.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conditions {
				if m, ok := c.(map[string]interface{}); ok && m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", obj.GetName(), err)
		}
	}
	return nil
}
