package controlplane_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/example/gamesession-controller/internal/controlplane"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	controlplane.RunTestMain(m, controlplane.Options{Nodes: 3, ControllerManager: true},
		func(c *controlplane.ControlPlane) { cp = c })
}

func adminClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// poll checks cond every 200ms for up to 60s and fails the test with the
// last observed state otherwise.
func poll(t *testing.T, what string, cond func(ctx context.Context) (bool, string, error)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 60*time.Second, true,
		func(ctx context.Context) (bool, error) {
			ok, state, err := cond(ctx)
			last = state
			return ok, err
		})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last state: %s)", what, err, last)
	}
}

// TestDeploymentRunsOnFakeNodesAndIsGarbageCollected exercises every
// component: the Deployment and ReplicaSet controllers and the garbage
// collector (kube-controller-manager), the scheduler, and kwok running pods.
func TestDeploymentRunsOnFakeNodesAndIsGarbageCollected(t *testing.T) {
	client := adminClient(t)
	ns := controlplane.CreateNamespace(t, client)
	labels := map[string]string{"app": "game"}
	replicas := int32(3)
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "game"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "game", Image: "example.com/game:1"}}},
			},
		},
	}
	if _, err := client.AppsV1().Deployments(ns).Create(t.Context(), deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	nodes, err := client.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{LabelSelector: controlplane.FakeNodeLabel})
	if err != nil {
		t.Fatal(err)
	}
	fake := map[string]bool{}
	for _, n := range nodes.Items {
		fake[n.Name] = true
	}
	if len(fake) != 3 {
		t.Fatalf("want 3 fake nodes, got %d", len(fake))
	}

	selector := metav1.ListOptions{LabelSelector: "app=game"}
	poll(t, "3/3 ready replicas running on fake nodes", func(ctx context.Context) (bool, string, error) {
		d, err := client.AppsV1().Deployments(ns).Get(ctx, "game", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		pods, err := client.CoreV1().Pods(ns).List(ctx, selector)
		if err != nil {
			return false, "", err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && podReady(&p) && fake[p.Spec.NodeName] {
				running++
			}
		}
		state := fmt.Sprintf("readyReplicas=%d pods=%d runningOnFakeNodes=%d", d.Status.ReadyReplicas, len(pods.Items), running)
		return d.Status.ReadyReplicas == 3 && running == 3 && len(pods.Items) == 3, state, nil
	})

	background := metav1.DeletePropagationBackground
	if err := client.AppsV1().Deployments(ns).Delete(t.Context(), "game", metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the garbage collector to remove ReplicaSet and pods", func(ctx context.Context) (bool, string, error) {
		rs, err := client.AppsV1().ReplicaSets(ns).List(ctx, selector)
		if err != nil {
			return false, "", err
		}
		pods, err := client.CoreV1().Pods(ns).List(ctx, selector)
		if err != nil {
			return false, "", err
		}
		return len(rs.Items) == 0 && len(pods.Items) == 0,
			fmt.Sprintf("replicaSets=%d pods=%d", len(rs.Items), len(pods.Items)), nil
	})
}

func TestServiceAccountConfigHasOnlyItsRBAC(t *testing.T) {
	client := adminClient(t)
	ns := controlplane.CreateNamespace(t, client)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nobody"}}
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(t.Context(), sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := cp.ServiceAccountConfig(t.Context(), ns, "nobody")
	if err != nil {
		t.Fatal(err)
	}
	saClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Authenticated as the service account, not as admin...
	review, err := saClient.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:" + ns + ":nobody"; review.Status.UserInfo.Username != want {
		t.Fatalf("authenticated as %q, want %q", review.Status.UserInfo.Username, want)
	}
	// ...and with no RBAC, so reading pods is forbidden.
	_, err = saClient.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("listing pods as a service account without RBAC: got %v, want Forbidden", err)
	}
}

func TestKubeconfigAndMetrics(t *testing.T) {
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != cp.APIServerURL() {
		t.Fatalf("kubeconfig server %q, want %q", cfg.Host, cp.APIServerURL())
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Get(t.Context(), "kube-system", metav1.GetOptions{}); err != nil {
		t.Fatalf("kubeconfig does not work: %v", err)
	}
	metrics, err := cp.APIServerMetrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(metrics, "apiserver_request_total{") {
		t.Fatalf("apiserver metrics lack apiserver_request_total; got %d bytes", len(metrics))
	}
}

// TestRestartAPIServerAndEtcd stops and starts kube-apiserver and restarts
// etcd: a client built before keeps working afterwards (same port, CA and
// token), and what was written before is still there.
func TestRestartAPIServerAndEtcd(t *testing.T) {
	client := adminClient(t)
	ns := controlplane.CreateNamespace(t, client)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before"}, Data: map[string]string{"k": "v"}}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	begin := time.Now()
	if err := cp.StopAPIServer(); err != nil {
		t.Fatalf("stop kube-apiserver: %v", err)
	}
	t.Logf("kube-apiserver stopped in %s", time.Since(begin).Round(time.Millisecond))
	if _, err := client.CoreV1().ConfigMaps(ns).Get(t.Context(), "before", metav1.GetOptions{}); err == nil {
		t.Fatal("a request to the stopped kube-apiserver succeeded")
	}
	begin = time.Now()
	if err := cp.StartAPIServer(t.Context()); err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Logf("kube-apiserver ready again in %s", time.Since(begin).Round(time.Millisecond))
	if _, err := client.CoreV1().ConfigMaps(ns).Get(t.Context(), "before", metav1.GetOptions{}); err != nil {
		t.Fatalf("the old client after the apiserver restart: %v", err)
	}

	begin = time.Now()
	if err := cp.RestartEtcd(t.Context()); err != nil {
		t.Fatalf("restart etcd: %v", err)
	}
	t.Logf("etcd restarted, kube-apiserver ready again in %s", time.Since(begin).Round(time.Millisecond))
	if _, err := client.CoreV1().ConfigMaps(ns).Get(t.Context(), "before", metav1.GetOptions{}); err != nil {
		t.Fatalf("data written before the etcd restart: %v", err)
	}
	cm.Name = "after"
	if _, err := client.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("write after the etcd restart: %v", err)
	}
	// The other components outlived both outages: Stop, in TestMain, fails
	// the run if any of them exited meanwhile.
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
