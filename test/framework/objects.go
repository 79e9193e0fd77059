package framework

import (
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

// ObjectClient returns an admin client that knows EtcdMembers and the built-in kinds. qps sets
// both its rate and burst: tests that poll objects tightly raise it above client-go's default,
// which would otherwise throttle their reads and time them wrongly; 0 keeps the default.
func (a *APIServer) ObjectClient(t TB, qps float32) client.WithWatch {
	t.Helper()
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatalf("scheme: %v", err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatalf("scheme: %v", err)
	}
	cfg := a.RESTConfig()
	if qps > 0 {
		cfg.QPS, cfg.Burst = qps, int(qps)
	}
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("API client: %v", err)
	}
	return cl
}
