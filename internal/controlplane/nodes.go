package controlplane

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	// FakeNodeLabel (type=kwok) selects the fake nodes CreateFakeNodes makes.
	FakeNodeLabel = "type=kwok"
	fakeNodeName  = "kwok-node-%d"
)

// CreateFakeNodes creates n fake nodes kwok-node-0..n-1 that kwok (started
// with --manage-all-nodes) turns Ready and whose pods it "runs". Existing
// nodes of the same name are left as they are, so the call is idempotent.
func CreateFakeNodes(ctx context.Context, client kubernetes.Interface, n int) error {
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	for i := range n {
		name := fmt.Sprintf(fakeNodeName, i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				Labels: map[string]string{
					"type":                   "kwok",
					"kubernetes.io/hostname": name,
					"kubernetes.io/os":       "linux",
					"kubernetes.io/arch":     "amd64",
				},
			},
			// Nodes are the one kind whose status may be set on create.
			Status: corev1.NodeStatus{Capacity: resources, Allocatable: resources},
		}
		if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create fake node %s: %w", name, err)
		}
	}
	return nil
}

// nodesReady reports whether at least n fake nodes are Ready and free of the
// not-ready taint, i.e. pods can be scheduled onto them.
func nodesReady(ctx context.Context, client kubernetes.Interface, n int) (bool, error) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: FakeNodeLabel})
	if err != nil {
		return false, nil
	}
	ready := 0
	for _, node := range nodes.Items {
		if isReady(&node) && !hasTaint(&node, corev1.TaintNodeNotReady) {
			ready++
		}
	}
	return ready >= n, nil
}

func isReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasTaint(node *corev1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}
