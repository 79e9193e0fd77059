package node

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestUninstallAsDocumented uninstalls in the order of docs/install.md "Uninstall", its blocks run
// as written, with the agent pod running and leading: delete the CRD, delete the DaemonSet, delete
// the rest of config/default. No etcd member is removed, no EtcdMember and no Node is left
// Terminating, and a Node deleted afterwards goes at once.
func TestUninstallAsDocumented(t *testing.T) {
	tr := newTier(t)
	tr.installLeading()
	tr.discovered("node-2")
	tr.discovered("node-3")
	members := tr.etcdMembers()

	tr.api.RunDocumented(t, "uninstall-crd")
	// Step 2 as documented: kubectl delete -f on the manifest (the image changed only).
	path := filepath.Join(t.TempDir(), "etcdmember-agent.yaml")
	if err := os.WriteFile(path, []byte(tr.manifest("daemonset/etcdmember-agent.yaml", tr.node.AgentImage)), 0o644); err != nil {
		t.Fatal(err)
	}
	tr.api.MustKubectl(t, "delete", "-f", path, "--wait=true", "--timeout=60s")
	tr.api.RunDocumented(t, "uninstall-config")

	tr.assertMembers(members...)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := tr.cs.Discovery().ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String()); !apierrors.IsNotFound(err) {
		t.Errorf("the EtcdMember API is still served after the uninstall: %v", err)
	}
	nodes, err := tr.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.DeletionTimestamp != nil || slices.Contains(n.Finalizers, v1alpha1.FinalizerNode) {
			t.Errorf("Node %s after the uninstall: deleting %v, finalizers %v", n.Name, n.DeletionTimestamp, n.Finalizers)
		}
	}
	tr.api.MustKubectl(t, "delete", "node", tr.node.Name, "--wait=false")
	framework.Eventually(t, 5*time.Second, pollEvery, "Node "+tr.node.Name+" deleted at once after the uninstall", func(ctx context.Context) (bool, error) {
		_, err := tr.cs.CoreV1().Nodes().Get(ctx, tr.node.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	tr.assertMembers(members...)
}
