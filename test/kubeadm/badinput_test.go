package kubeadm

import (
	"context"
	"fmt"
	"maps"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/internal/controller"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
	tier "github.com/etcdmember/kubectl-etcdmember/test/framework/kubeadm"
)

// healthcheckCert is the etcd client certificate kubeadm makes for health checks, which
// docs/runbooks.md gives the agent; kubeadm makes none when etcd is external.
const healthcheckCert = "/etc/kubernetes/pki/etcd/healthcheck-client.crt"

// missingCert runs the DaemonSet's agent on node-3 without healthcheckCert, as on a kubeadm node
// whose etcd is external: the manifest's hostPath volume is of type File, so the container never
// starts and the pod's Events name the missing file. Nothing changes in etcd. Once the file is
// back, the kubelet's next mount attempt starts the agent, which registers as before.
func (w *workflow) missingCert() {
	n := w.nodes[2]
	cert := n.HostPath(w.t, healthcheckCert)
	aside := cert + ".aside"
	if err := os.Rename(cert, aside); err != nil {
		w.t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := os.Rename(aside, cert); err != nil {
				w.t.Errorf("putting %s back: %v", healthcheckCert, err)
			}
		}
	}
	w.t.Cleanup(restore)
	before := w.etcdMembers()
	old := w.agentPodOn(n)
	if err := w.cs.CoreV1().Pods("kube-system").Delete(context.Background(), old, metav1.DeleteOptions{}); err != nil {
		w.t.Fatal(err)
	}
	framework.Eventually(w.t, settle, pollEvery, n.Name+"'s agent pod replaced", func(context.Context) (bool, error) {
		if pod := w.agentPodOn(n); pod == old {
			return false, fmt.Errorf("%s not replaced yet", old)
		}
		return true, nil
	})
	if ev := framework.PodEvent(w.t, w.cs, settle, pollEvery, w.agentPodOn(n), healthcheckCert); ev.Reason != "FailedMount" {
		w.t.Errorf("the Event naming %s is %s: %s, want FailedMount", healthcheckCert, ev.Reason, ev.Message)
	}
	p, err := w.cs.CoreV1().Pods("kube-system").Get(context.Background(), w.agentPodOn(n), metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Running != nil || s.RestartCount > 0 {
			w.t.Errorf("the agent container of %s started without %s: %+v", p.Name, healthcheckCert, s.State)
		}
	}
	if p.Status.Phase != corev1.PodPending {
		w.t.Errorf("%s is %s without %s, want Pending", p.Name, p.Status.Phase, healthcheckCert)
	}
	w.membersHold(before, n.Name+"'s agent could not start")
	restore()
	w.agentPodsRolledOut()
	w.registered(n)
}

// agentPodOn is the name of n's agent pod that is not being deleted.
func (w *workflow) agentPodOn(n *tier.Node) string {
	w.t.Helper()
	var name string
	framework.Eventually(w.t, settle, pollEvery, "an agent pod on "+n.Name, func(ctx context.Context) (bool, error) {
		pods, err := w.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: framework.AgentSelector,
			FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				name = p.Name
				return true, nil
			}
		}
		return false, fmt.Errorf("%d pods, all being deleted", len(pods.Items))
	})
	return name
}

// membersHold checks that etcd's members stay before for two of the leader's probe intervals,
// while what (a bad input) lasts: what a pod that cannot act could set off would show by then.
func (w *workflow) membersHold(before map[string]etcdMember, what string) {
	w.t.Helper()
	if err := framework.Hold(2*controller.DefaultProbeInterval, time.Second, func(context.Context) (bool, error) {
		if after := w.etcdMembers(); !maps.Equal(after, before) {
			return false, fmt.Errorf("now %v, before %v", after, before)
		}
		return true, nil
	}); err != nil {
		w.t.Errorf("etcd's members changed while %s: %v", what, err)
	}
}
