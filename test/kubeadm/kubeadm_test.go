package kubeadm

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
	tier "github.com/etcdmember/kubectl-etcdmember/test/framework/kubeadm"
)

// TestKubeadm is the kubeadm workflow: the cluster kubeadm initialized, then each task in order,
// each leaving the cluster as the next one needs it.
func TestKubeadm(t *testing.T) {
	w := newWorkflow(t)
	w.run(
		task{"install", (*workflow).install},
		task{"grow", (*workflow).grow},
		task{"etcd-upgrade", (*workflow).etcdUpgrade},
		task{"remove-for-good", (*workflow).removeForGood},
		task{"rejoin", (*workflow).rejoin},
		task{"reset-first", (*workflow).resetFirst},
		task{"rejoin-after-reset", (*workflow).rejoin},
		task{"replace-dead", (*workflow).replaceDead},
		task{"unreachable-removed", (*workflow).unreachableRemoved},
		task{"missing-cert", (*workflow).missingCert},
		task{"static-pod", (*workflow).staticPod},
	)
}

// install installs etcdmember on the one-node control plane as docs/runbooks.md "Install on
// kubeadm" says, with the DaemonSet: node-1's agent pod reads the etcd client certificate kubeadm
// made for health checks and registers its member, bound to its Node, under the ID etcd gives it.
func (w *workflow) install() {
	w.admin.InstallEtcdmember(w.t)
	w.applyDaemonSet()
	w.agentPodsReady(w.nodes[0])
	w.registered(w.nodes[0])
}

// grow joins node-2 and node-3 with `kubeadm join --control-plane` while the agents run. kubeadm
// adds each member as a learner and promotes it; so does the leader, which also evicts a learner
// that stalls. Each join exits 0, each learner is promoted once, by whichever came first, nothing
// is evicted, and no object the leader made for a member without an agent (member-<id>) is left
// once the node's agent registers.
func (w *workflow) grow() {
	for i, n := range w.nodes[1:] {
		start := time.Now()
		w.cluster.Join(w.t, n)
		w.t.Logf("kubeadm join --control-plane on %s: %s", n.Name, time.Since(start).Round(100*time.Millisecond))
		w.agentPodsReady(w.nodes[:i+2]...)
		w.registered(n)
	}
	w.onlyNodeObjects()
	for _, n := range w.nodes {
		if ev := w.events(n.Name, v1alpha1.ReasonPromoted); len(ev) > 1 {
			w.t.Errorf("%s promoted %d times, want at most once (kubeadm promotes it too): %v", n.Name, len(ev), ev)
		}
		if ev := w.events(n.Name, v1alpha1.ReasonEvicted); len(ev) > 0 {
			w.t.Errorf("%s evicted during its join: %v", n.Name, ev)
		}
	}
	run := w.admin.Plugin(w.t, nil, nil, "list")
	for _, n := range w.nodes {
		if run.Code != 0 || !strings.Contains(run.Stdout, n.Name) {
			w.t.Errorf("kubectl etcdmember list (exit %d) does not show %s:\n%s", run.Code, n.Name, run.Output())
		}
	}
}

// registered waits until n's object is Joined=True and Healthy=True, bound to n's Node, and checks
// that it records the member ID etcd's member list gives n's member (kubeadm names a member after
// its node) as a voter.
func (w *workflow) registered(n *tier.Node) {
	w.t.Helper()
	m := w.member(n.Name, "registered Joined and Healthy, bound to its Node", func(m *v1alpha1.EtcdMember) bool {
		return status.IsTrue(m, v1alpha1.ConditionJoined) && status.IsTrue(m, v1alpha1.ConditionHealthy) &&
			m.Status.NodeName == n.Name && !m.Status.IsLearner
	})
	member, ok := w.etcdMembers()[n.Name]
	switch {
	case !ok:
		w.t.Errorf("etcd's member list has no member %s", n.Name)
	case member.IsLearner:
		w.t.Errorf("etcd's member %s is still a learner, its object says a voter", n.Name)
	case m.Status.MemberID != member.ID:
		w.t.Errorf("%s's object records member %s, etcd's member list %s", n.Name, m.Status.MemberID, member.ID)
	}
}

// onlyNodeObjects checks that every EtcdMember is one of a node's.
func (w *workflow) onlyNodeObjects() {
	w.t.Helper()
	framework.Eventually(w.t, settle, pollEvery, "an EtcdMember for each node and no other", func(ctx context.Context) (bool, error) {
		var list v1alpha1.EtcdMemberList
		if err := w.client.List(ctx, &list); err != nil {
			return false, err
		}
		var names []string
		for _, m := range list.Items {
			names = append(names, m.Name)
		}
		for _, n := range w.nodes {
			if !slices.Contains(names, n.Name) {
				return false, fmt.Errorf("objects %v", names)
			}
		}
		if len(names) != len(w.nodes) {
			return false, fmt.Errorf("objects %v", names)
		}
		return true, nil
	})
}

// events are the Events in kube-system about the EtcdMember name with reason.
func (w *workflow) events(name, reason string) []string {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := framework.MemberEvents(ctx, w.client, name, reason)
	if err != nil {
		w.t.Fatalf("%v", err)
	}
	var out []string
	for _, ev := range list {
		out = append(out, fmt.Sprintf("%s %s: %s", ev.CreationTimestamp.Format(time.RFC3339), ev.Reason, ev.Note))
	}
	return out
}

type etcdMember struct {
	ID        string
	IsLearner bool
}

// etcdMembers is etcd's member list, read with etcdctl through node-1's member, by name.
func (w *workflow) etcdMembers() map[string]etcdMember {
	w.t.Helper()
	out, err := w.cluster.Etcdctl(w.t, "member", "list", "-w", "json")
	if err != nil {
		w.t.Fatalf("%v\n%s", err, out)
	}
	var list struct {
		Members []struct {
			ID        uint64 `json:"ID"`
			Name      string `json:"name"`
			IsLearner bool   `json:"isLearner"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		w.t.Fatalf("etcdctl member list: %v\n%s", err, out)
	}
	members := map[string]etcdMember{}
	for _, m := range list.Members {
		members[m.Name] = etcdMember{ID: fmt.Sprintf("%x", m.ID), IsLearner: m.IsLearner}
	}
	return members
}

// etcdVersionsAre checks that every member etcd lists serves a version starting with prefix.
func (w *workflow) etcdVersionsAre(prefix string) {
	w.t.Helper()
	out, err := w.cluster.Etcdctl(w.t, "endpoint", "status", "--cluster", "-w", "json")
	if err != nil {
		w.t.Fatalf("%v\n%s", err, out)
	}
	versions, err := endpointVersions(out)
	if err != nil {
		w.t.Fatalf("etcdctl endpoint status: %v\n%s", err, out)
	}
	if len(versions) == 0 {
		w.t.Fatalf("etcdctl endpoint status listed no endpoint:\n%s", out)
	}
	for endpoint, v := range versions {
		if !strings.HasPrefix(v, prefix) {
			w.t.Errorf("etcd at %s serves %q, want %s*", endpoint, v, prefix)
		}
	}
}

// endpointVersions is the version each endpoint serves, from `etcdctl endpoint status -w json`.
func endpointVersions(out string) (map[string]string, error) {
	var statuses []struct {
		Endpoint string `json:"Endpoint"`
		Status   struct {
			Version string `json:"version"`
		} `json:"Status"`
	}
	if err := json.Unmarshal([]byte(out), &statuses); err != nil {
		return nil, err
	}
	versions := map[string]string{}
	for _, s := range statuses {
		versions[s.Endpoint] = s.Status.Version
	}
	return versions, nil
}
