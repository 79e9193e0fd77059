package framework

import (
	"context"
	"fmt"

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
