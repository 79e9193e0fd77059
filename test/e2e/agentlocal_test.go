package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestPeerURLChangeCorrected: a member restarted on a new address keeps its old peer URL in
// etcd's record. Its agent, told the new one, finds its etcd answering there and publishes it in
// status.advertisedPeerURLs; the leading agent then updates etcd's record and says so in a
// PeerURLsUpdated Event, and the other members reach the moved one again.
func TestPeerURLChangeCorrected(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	m := nonLeaders(e)[0]
	oldPeerURL := m.PeerURL()
	a := e.agents[m.Name]
	a.Stop(t)
	m.MoveTo(t)
	if m.PeerURL() == oldPeerURL {
		t.Fatalf("MoveTo kept the peer URL %s", oldPeerURL)
	}
	cli := e.cluster.Client(t)

	a.SetArgs(e.leastPrivilege("--advertise-peer-urls=" + m.PeerURL())...)
	a.Start(t)
	e.waitFor(m.Name, "status.advertisedPeerURLs = "+m.PeerURL(), func(o *v1alpha1.EtcdMember) bool {
		return slices.Equal(o.Status.AdvertisedPeerURLs, []string{m.PeerURL()})
	})
	waitUntil(t, "etcd records "+m.PeerURL()+" for "+m.Name, func() bool {
		return slices.Equal(etcdPeerURLs(t, cli, m.ID()), []string{m.PeerURL()})
	})
	e.waitFor(m.Name, "status.peerURLs = "+m.PeerURL(), func(o *v1alpha1.EtcdMember) bool {
		return slices.Equal(o.Status.PeerURLs, []string{m.PeerURL()})
	})
	ev := e.waitEvent(m.Name, corev1.EventTypeNormal, v1alpha1.ReasonPeerURLsUpdated)
	if !strings.Contains(ev.Note, m.PeerURL()) {
		t.Errorf("Event note %q lacks the new peer URL %s", ev.Note, m.PeerURL())
	}
	if n := countEvents(e, m.Name, v1alpha1.ReasonPeerURLsUnverified); n != 0 {
		t.Errorf("%d %s Events for a URL the member answers on", n, v1alpha1.ReasonPeerURLsUnverified)
	}
	// The apiserver's record of who wrote what: the agent's field is the agent's, and what the
	// leader made etcd record, and what its probes found, is the leader's.
	obj := e.get(m.Name)
	agent := statusFieldsOf(t, obj, v1alpha1.FieldManagerAgent)
	leader := statusFieldsOf(t, obj, v1alpha1.FieldManagerLeader)
	if !agent["advertisedPeerURLs"] || leader["advertisedPeerURLs"] {
		t.Errorf("status.advertisedPeerURLs owned by agent %t, leader %t; want the agent only", agent["advertisedPeerURLs"], leader["advertisedPeerURLs"])
	}
	for _, f := range []string{"peerURLs", "health"} {
		if !leader[f] || agent[f] {
			t.Errorf("status.%s owned by leader %t, agent %t; want the leader only", f, leader[f], agent[f])
		}
	}
	// The other members reach the moved one again: it serves a linearizable read.
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := m.Client(t).Get(ctx, "e2e/after-move"); err != nil {
		t.Errorf("moved member does not serve: %v", err)
	}
}

// TestPeerURLFlagRejected: a peer URL etcd could not use ends the agent before it starts.
func TestPeerURLFlagRejected(t *testing.T) {
	t.Parallel()
	out, code := runAgentCLI(t, "serve", "--etcd-endpoints", "http://127.0.0.1:1",
		"--advertise-peer-urls", "http://10.0.0.1:2380,ftp://10.0.0.2:2380")
	if code == 0 || !strings.Contains(out, "--advertise-peer-urls") || !strings.Contains(out, "scheme must be http or https") {
		t.Errorf("exit %d, output %q; want a non-zero exit naming the bad URL", code, out)
	}
}

// TestOnRemovedExecRunsOnce: after its member was removed on request, the agent runs the
// command once, with the member in its environment, and records the outcome; a restart does not
// run it again. A failing command gives a Warning with its exit code.
func TestOnRemovedExecRunsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3, agents: []string{"node-1"}})
	if leader := e.leaderAgent(); leader != "node-1" {
		t.Fatalf("the only agent, node-1, does not lead: %s does", leader)
	}
	runs := filepath.Join(t.TempDir(), "runs")
	ok, failing := e.cluster.Member("node-3"), e.cluster.Member("node-2")
	okHook := fmt.Sprintf(`echo "$ETCDMEMBER_NAME $ETCDMEMBER_MEMBER_ID" >> '%s'; echo cleaned-up-$ETCDMEMBER_NAME`, runs)
	e.agents[ok.Name] = framework.StartAgent(t, ok, e.api, e.leastPrivilege("--on-removed-exec="+okHook)...)
	e.agents[failing.Name] = framework.StartAgent(t, failing, e.api, e.leastPrivilege("--on-removed-exec=echo about-to-fail; exit 3")...)

	e.leave(ok.Name)
	e.waitFor(ok.Name, "Left=True/Removed", removedByUs)
	ev := e.waitEvent(ok.Name, corev1.EventTypeNormal, v1alpha1.ReasonOnRemovedExecSucceeded)
	for _, want := range []string{"exited with code 0", "cleaned-up-" + ok.Name} {
		if !strings.Contains(ev.Note, want) {
			t.Errorf("Event note %q lacks %q", ev.Note, want)
		}
	}
	want := ok.Name + " " + ok.IDHex()
	if lines := fileLines(t, runs); !slices.Equal(lines, []string{want}) {
		t.Fatalf("command ran as %q, want once as %q", lines, want)
	}
	if got := e.get(ok.Name).Annotations[v1alpha1.AnnotationOnRemovedRan]; got != ok.IDHex() {
		t.Errorf("annotation %s = %q, want %s", v1alpha1.AnnotationOnRemovedRan, got, ok.IDHex())
	}

	// The second removal leaves node-1 alone: 1 healthy voter of 1, which the guard allows.
	e.leave(failing.Name)
	ev = e.waitEvent(failing.Name, corev1.EventTypeWarning, v1alpha1.ReasonOnRemovedExecFailed)
	for _, want := range []string{"exit status 3", "about-to-fail"} {
		if !strings.Contains(ev.Note, want) {
			t.Errorf("Event note %q lacks %q", ev.Note, want)
		}
	}

	// Its etcd is gone, so the restarted agent never becomes ready; it must not run the command.
	okAgent := e.agents[ok.Name]
	okAgent.Stop(t)
	okAgent.StartUnready(t)
	time.Sleep(4 * time.Second)
	if !okAgent.Running() {
		t.Fatalf("the restarted agent exited")
	}
	if lines := fileLines(t, runs); len(lines) != 1 {
		t.Fatalf("command ran %d times after a restart, want once: %q", len(lines), lines)
	}
	if n := countEvents(e, ok.Name, v1alpha1.ReasonOnRemovedExecSucceeded); n != 1 {
		t.Errorf("%d %s Events, want 1", n, v1alpha1.ReasonOnRemovedExecSucceeded)
	}
}

// TestOnRemovedExecNotRunForRefusedLeave: a leave the quorum guard refuses removes nothing, so
// the command does not run; once the refusal lifts and the member is removed, it runs once.
func TestOnRemovedExecNotRunForRefusedLeave(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3, agents: []string{"node-1"}})
	if leader := e.leaderAgent(); leader != "node-1" {
		t.Fatalf("the only agent, node-1, does not lead: %s does", leader)
	}
	runs := filepath.Join(t.TempDir(), "runs")
	dead, target := e.cluster.Member("node-2"), e.cluster.Member("node-3")
	e.agents[target.Name] = framework.StartAgent(t, target, e.api, e.leastPrivilege(fmt.Sprintf("--on-removed-exec=echo ran >> '%s'", runs))...)
	dead.Kill(t)

	e.leave(target.Name)
	e.waitFor(target.Name, "Left=False/QuorumAtRisk", leftReason(v1alpha1.ReasonQuorumAtRisk))
	if err := framework.Hold(3*time.Second, pollEvery, notCreated(runs)); err != nil {
		t.Fatalf("the command ran for a refused leave (%v)", err)
	}

	dead.Start(t)
	e.waitFor(target.Name, "Left=True/Removed", removedByUs)
	waitUntil(t, "the command ran", func() bool { return len(fileLines(t, runs)) > 0 })
	time.Sleep(2 * time.Second)
	if lines := fileLines(t, runs); len(lines) != 1 {
		t.Fatalf("command ran %d times, want once", len(lines))
	}
}

// leastPrivilege prepends the scenario's agent credential to per-agent args, as newEnv does: the
// agent's writes (the on-removed annotation among them) must pass the shipped RBAC.
func (e *env) leastPrivilege(args ...string) []string {
	return append([]string{"--kubeconfig=" + e.agentKubeconfig}, args...)
}

// etcdPeerURLs returns the peer URLs etcd records for the member id.
func etcdPeerURLs(t *testing.T, cli *clientv3.Client, id uint64) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list: %v", err)
	}
	if m := framework.FindMember(resp.Members, id); m != nil {
		return m.PeerURLs
	}
	return nil
}

func countEvents(e *env, name, reason string) int {
	n := 0
	for _, ev := range e.events(name) {
		if ev.Reason == reason {
			n++
		}
	}
	return n
}

// fileLines returns the file's lines, none if it does not exist.
func fileLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

// waitUntil waits up to settle for ok to hold.
func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	framework.Eventually(t, settle, pollEvery, what, func(context.Context) (bool, error) { return ok(), nil })
}

// notCreated holds while the file at path does not exist; it breaks with the stat's answer.
func notCreated(path string) framework.Condition {
	return func(context.Context) (bool, error) {
		switch _, err := os.Stat(path); {
		case err == nil:
			return false, errors.New("stat: the file exists")
		case !errors.Is(err, os.ErrNotExist):
			return false, fmt.Errorf("stat: %w", err)
		}
		return true, nil
	}
}

// statusFieldsOf returns the top-level status fields metadata.managedFields records as last
// written by manager through the status subresource.
func statusFieldsOf(t *testing.T, obj *v1alpha1.EtcdMember, manager string) map[string]bool {
	t.Helper()
	owned := map[string]bool{}
	for _, mf := range obj.ManagedFields {
		if mf.Manager != manager || mf.Subresource != "status" || mf.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Status map[string]json.RawMessage `json:"f:status"`
		}
		if err := json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields); err != nil {
			t.Fatalf("managedFields of %s by %s: %v", obj.Name, manager, err)
		}
		for k := range fields.Status {
			owned[strings.TrimPrefix(k, "f:")] = true
		}
	}
	return owned
}
