package framework

import (
	"context"
	"fmt"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

// ObjectClient returns an admin client that knows EtcdMembers and the built-in kinds. qps sets
// both its rate and burst: tests that poll objects tightly raise it above client-go's default,
// which would otherwise throttle their reads and time them wrongly; 0 keeps the default.
func (a *APIServer) ObjectClient(t TB, qps float32) client.WithWatch {
	t.Helper()
	return objectClient(t, a.RESTConfig(), qps)
}

// ObjectClient is APIServer.ObjectClient for the kubeconfig's cluster.
func (k Admin) ObjectClient(t TB, qps float32) client.WithWatch {
	t.Helper()
	return objectClient(t, k.RESTConfig(t), qps)
}

// ObjectClientAt is ObjectClient through the cluster's apiserver at host ("https://ip:port")
// instead of the kubeconfig's server: in a cluster of several apiservers, one that is up while the
// kubeconfig's is not (its serving certificate must name host).
func (k Admin) ObjectClientAt(t TB, host string, qps float32) client.WithWatch {
	t.Helper()
	cfg := k.RESTConfig(t)
	cfg.Host = host
	return objectClient(t, cfg, qps)
}

// RESTConfig is the kubeconfig's client configuration.
func (k Admin) RESTConfig(t TB) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", string(k))
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", k, err)
	}
	return cfg
}

// Clientset is a clientset with the kubeconfig.
func (k Admin) Clientset(t TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(k.RESTConfig(t))
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", k, err)
	}
	return cs
}

func objectClient(t TB, cfg *rest.Config, qps float32) client.WithWatch {
	t.Helper()
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatalf("scheme: %v", err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatalf("scheme: %v", err)
	}
	if qps > 0 {
		cfg.QPS, cfg.Burst = qps, int(qps)
	}
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("API client: %v", err)
	}
	return cl
}

// WaitOwnObject waits until an agent registered the object that records the agent's member: it
// carries no etcdmember.io/discovered label. WaitReady does not say as much: an agent is ready once
// a sync found its member recorded in any object, among them one the leader created for a member
// that went without one for the discovery grace (5 s at TestAgentArgs' timings), as an agent
// started late or slowly lets it. That label stays for good (list notes the member "discovered",
// prune-stale counts it registered by nobody), so finding it ends the wait at once.
func (a *Agent) WaitOwnObject(t TB) {
	t.Helper()
	cl := a.api.ObjectClient(t, 0)
	id := a.member.IDHex()
	err := poll(agentReadyTimeout, func(ctx context.Context) error {
		var list v1alpha1.EtcdMemberList
		if err := cl.List(ctx, &list); err != nil {
			return fmt.Errorf("listing EtcdMembers: %w", err)
		}
		obj := list.FindByMemberID(id)
		switch {
		case obj == nil:
			return fmt.Errorf("no EtcdMember records member %s", id)
		case obj.Labels[v1alpha1.LabelDiscovered] == "true":
			return Stop(fmt.Errorf("the leader discovered member %s (EtcdMember %s) before its agent registered it", id, obj.Name))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("agent %s: its own EtcdMember: %v", a.Name, err)
	}
}

// MemberEvents lists the Events in kube-system about the EtcdMember name, those with reason only
// unless it is empty.
func MemberEvents(ctx context.Context, c client.Client, name, reason string) ([]eventsv1.Event, error) {
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace("kube-system")); err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Regarding.Kind == "EtcdMember" && ev.Regarding.Name == name && (reason == "" || ev.Reason == reason) {
			out = append(out, ev)
		}
	}
	return out, nil
}

// WaitEtcdMember waits up to timeout for the EtcdMember name to satisfy ok, reading it every
// interval, and returns it; what says what ok waits for.
func WaitEtcdMember(t TB, c client.Client, timeout, interval time.Duration, name, what string, ok func(*v1alpha1.EtcdMember) bool) *v1alpha1.EtcdMember {
	t.Helper()
	m := &v1alpha1.EtcdMember{}
	Eventually(t, timeout, interval, "EtcdMember "+name+" "+what, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Name: name}, m); err != nil {
			return false, nil
		}
		return ok(m), nil
	})
	return m
}
