package framework_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestStartupTime runs first and alone (it is not parallel), so the figure is
// not inflated by the other tests' processes.
func TestStartupTime(t *testing.T) {
	start := time.Now()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3})
	framework.StartAPIServer(t, c)
	elapsed := time.Since(start)

	t.Logf("3 etcd members + kube-apiserver ready in %s", elapsed.Round(time.Millisecond))
	if limit := 15 * time.Second; elapsed > limit {
		t.Errorf("startup took %s, over the %s budget", elapsed, limit)
	}
}

func TestAPIServerServesAndWatches(t *testing.T) {
	t.Parallel()
	api := framework.StartAPIServer(t, framework.NewCluster(t, framework.ClusterConfig{Size: 3}))
	cs := api.Clientset()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil || string(body) != "ok" {
		t.Fatalf("/readyz = %q, %v", body, err)
	}
	version, err := cs.Discovery().ServerVersionWithContext(ctx)
	if err != nil {
		t.Fatalf("/version: %v", err)
	}
	if version.GitVersion != "v1.37.2" {
		t.Errorf("gitVersion = %q, want v1.37.2", version.GitVersion)
	}

	configMaps := cs.CoreV1().ConfigMaps(metav1.NamespaceDefault)
	w, err := configMaps.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "watched").String()})
	if err != nil {
		t.Fatalf("watch configmaps: %v", err)
	}
	defer w.Stop()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watched"}, Data: map[string]string{"k": "v"}}
	if _, err := configMaps.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create configmap: %v", err)
	}
	select {
	case ev := <-w.ResultChan():
		got, ok := ev.Object.(*corev1.ConfigMap)
		if ev.Type != watch.Added || !ok || got.Data["k"] != "v" {
			t.Fatalf("first watch event = %s %#v, want ADDED of the configmap", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatalf("watch saw no event: %v", ctx.Err())
	}
}

func TestRestrictedCredential(t *testing.T) {
	t.Parallel()
	api := framework.StartAPIServer(t, framework.NewCluster(t, framework.ClusterConfig{Size: 1}))
	cfg, kubeconfig := api.Restricted(t, "configmap-reader", []rbacv1.PolicyRule{{
		APIGroups: []string{""},
		Resources: []string{"configmaps"},
		Verbs:     []string{"get", "list"},
	}})
	if kubeconfig == "" {
		t.Errorf("Restricted returned no kubeconfig path")
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err = cs.CoreV1().Secrets(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("listing secrets: got %v, want Forbidden", err)
	}
	if _, err := cs.CoreV1().ConfigMaps(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing configmaps: %v", err)
	}

	// The binding lives in etcd, so it survives an apiserver restart.
	api.Restart(t)
	if _, err := cs.CoreV1().ConfigMaps(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing configmaps after restart: %v", err)
	}
}
