package e2e

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// Uninstalling as docs/install.md says ("Uninstall") removes no etcd member and leaves nothing
// Terminating, whether the agents still run when the CRD is deleted or are gone already. Both
// scenarios run with --leave-on-node-delete and bound Nodes, so that the Nodes' finalizer is
// there to be released too.

// crdGone bounds how long deleting the CRD may take with the agents running: the apiserver looks
// for the objects it deleted every 5 s, so two or three looks.
const crdGone = 20 * time.Second

// TestUninstallWithAgentsRunning: the documented order, the agents still running when the CRD is
// deleted: the leading agent lets every object and every Node go, removes no member, and puts no
// finalizer back; the rest of config/default then deletes within its timeout.
func TestUninstallWithAgentsRunning(t *testing.T) {
	t.Parallel()
	e := newNodeEnv(t, envConfig{size: 3})
	before := e.etcdMemberIDs()

	took := e.runDocumented("uninstall-crd")
	if took > crdGone {
		t.Errorf("deleting the CRD took %s, want at most %s", took, crdGone)
	}
	e.assertUninstalled(before)
	// Still running, the agents hold nothing: a Node deleted now goes at once. (None leads any
	// more: with the CRD gone, none can register its member, which campaigning waits for.)
	target := e.cluster.Member("node-2")
	e.startDeleteNode(target.Name)
	if node := e.api.Node(t, target.Name); node != nil {
		t.Errorf("a Node deleted after the uninstall, agents running, did not go at once: %s", framework.NodeString(node))
	}
	if !e.agentLogsContain("Letting the object go with the CRD") {
		t.Errorf("no agent says it let the objects go with the CRD")
	}

	for _, a := range e.agents {
		a.Stop(t)
	}
	e.runDocumented("uninstall-config")
	e.assertConfigGone()
	if after := e.etcdMemberIDs(); !maps.Equal(before, after) {
		t.Errorf("etcd lists %v after the uninstall, want %v", after, before)
	}
}

// TestUninstallWithAgentsGone: the agents stopped before anything was deleted, the objects and
// Nodes still holding etcdmember's finalizers, and the documented commands run as they are; once
// before any deletion, and once after a `kubectl delete -k config/default` that timed out on the
// CRD (the hang the documented commands get out of, the CRD Terminating meanwhile). Another
// finalizer on an object is left alone.
func TestUninstallWithAgentsGone(t *testing.T) {
	t.Parallel()
	for _, hung := range []bool{false, true} {
		name := "before any deletion"
		if hung {
			name = "after a hung delete"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newNodeEnv(t, envConfig{size: 3})
			before := e.etcdMemberIDs()
			const keep = "example.com/keep"
			e.kubectl("patch", "etcdmembers.etcdmember.io", "node-1", "--type", "json", "-p",
				`[{"op":"add","path":"/metadata/finalizers/0","value":"`+keep+`"}]`)
			for _, a := range e.agents {
				a.Stop(t)
			}
			if hung {
				out, err := e.api.Kubectl(t, "delete", "-k", filepath.Join(repoRoot(t), "config", "default"), "--timeout=5s")
				if err == nil {
					t.Fatalf("kubectl delete -k config/default finished with the objects' finalizers on:\n%s", out)
				}
				if crd := e.crd(); crd == nil || crd.DeletionTimestamp == nil {
					t.Fatalf("after the delete that timed out, the CRD is not Terminating: %+v", crd)
				}
			}

			e.runDocumented("uninstall-release-finalizers")
			if got := e.get("node-1").Finalizers; !slices.Equal(got, []string{keep}) {
				t.Errorf("after the documented command, node-1's finalizers are %v, want [%s]", got, keep)
			}
			e.kubectl("patch", "etcdmembers.etcdmember.io", "node-1", "--type", "json", "-p",
				`[{"op":"test","path":"/metadata/finalizers/0","value":"`+keep+`"},{"op":"remove","path":"/metadata/finalizers/0"}]`)
			e.runDocumented("uninstall-config")
			e.assertUninstalled(before)
			e.assertConfigGone()
			target := e.cluster.Member("node-2")
			e.startDeleteNode(target.Name)
			if node := e.api.Node(t, target.Name); node != nil {
				t.Errorf("a Node deleted after the uninstall did not go at once: %s", framework.NodeString(node))
			}
		})
	}
}

// runDocumented runs a documented block of docs/install.md (framework.RunDocumented).
func (e *env) runDocumented(marker string) time.Duration {
	e.t.Helper()
	return e.api.RunDocumented(e.t, marker)
}

// assertUninstalled checks what an uninstall leaves: no CRD, hence no EtcdMember (the apiserver
// deletes the CRD only once every object is gone), etcd's members as before, and no Node holding
// etcdmember's finalizer.
func (e *env) assertUninstalled(before map[uint64]bool) {
	e.t.Helper()
	if crd := e.crd(); crd != nil {
		e.t.Errorf("the CRD is still there: deletionTimestamp %v, finalizers %v", crd.DeletionTimestamp, crd.Finalizers)
	}
	if after := e.etcdMemberIDs(); !maps.Equal(before, after) {
		e.t.Errorf("etcd lists %v after the uninstall, want %v", after, before)
	}
	for _, m := range e.cluster.Members() {
		if node := e.api.Node(e.t, m.Name); node != nil && slices.Contains(node.Finalizers, v1alpha1.FinalizerNode) {
			e.t.Errorf("after the uninstall: %s", framework.NodeString(node))
		}
	}
}

// assertConfigGone checks that nothing of config/default is left, nor the agents' Lease.
func (e *env) assertConfigGone() {
	e.t.Helper()
	if left := e.api.MustKubectl(e.t, "get", "-k", filepath.Join(repoRoot(e.t), "config", "default"), "--ignore-not-found", "-o", "name"); strings.TrimSpace(left) != "" {
		e.t.Errorf("left of config/default after the uninstall:\n%s", left)
	}
	if out, err := e.api.Kubectl(e.t, "get", "lease", "-n", "kube-system", v1alpha1.LeaseName, "--ignore-not-found", "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
		e.t.Errorf("the agents' Lease after the uninstall: %v\n%s", err, out)
	}
}

// crd returns the EtcdMember CRD's metadata, nil once it is gone.
func (e *env) crd() *metav1.PartialObjectMetadata {
	e.t.Helper()
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	gone := false
	e.retry("get the CRD", func(ctx context.Context) error {
		err := e.client.Get(ctx, types.NamespacedName{Name: v1alpha1.CRDName}, crd)
		gone = apierrors.IsNotFound(err)
		if gone {
			return nil
		}
		return err
	})
	if gone {
		return nil
	}
	return crd
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, ok := framework.RepoRoot()
	if !ok {
		t.Fatal("repository root not found")
	}
	return root
}
