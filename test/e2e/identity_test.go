package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestVIPDoesNotChangeLocalMember: node-1's agent reaches its etcd through a VIP. When the VIP
// moves to node-2, the agent keeps node-1's member: it goes not ready, writes one Warning, steps
// down as leader, and nothing is removed. Pointed back, it is ready again.
func TestVIPDoesNotChangeLocalMember(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3, agents: []string{}})
	n1, n2 := e.cluster.Member("node-1"), e.cluster.Member("node-2")
	vip := startForwarder(t, hostPort(t, n1.ClientURL()))
	a := startVIPAgent(t, e, n1, "http://"+vip.addr())
	a.waitReady(t)
	if leader := e.leaderAgent(); leader != "node-1" {
		t.Fatalf("the only agent, node-1, does not lead: %s does", leader)
	}
	for _, name := range []string{"node-2", "node-3"} {
		e.agents[name] = framework.StartAgent(t, e.cluster.Member(name), e.api, e.leastPrivilege()...)
	}
	e.waitFor("node-1", "registered as "+n1.IDHex(), func(o *v1alpha1.EtcdMember) bool {
		return o.Status.MemberID == n1.IDHex() && joined(o)
	})
	before := e.etcdMemberIDs()

	vip.switchTo(hostPort(t, n2.ClientURL()))
	waitUntil(t, "node-1's agent not ready", func() bool { return !a.ready() })
	ev := e.waitEvent("node-1", corev1.EventTypeWarning, v1alpha1.ReasonLocalMemberChanged)
	for _, want := range []string{n1.IDHex(), n2.IDHex(), "--etcd-endpoints"} {
		if !strings.Contains(ev.Note, want) {
			t.Errorf("Event note %q lacks %q", ev.Note, want)
		}
	}
	waitUntil(t, "node-1's agent no longer leads", func() bool { return e.leaderAgent() != "node-1" })
	e.holds("node-1", "memberID stays "+n1.IDHex(), 5*time.Second, func(o *v1alpha1.EtcdMember) bool {
		return o.Status.MemberID == n1.IDHex() && joined(o)
	})
	if a.ready() {
		t.Errorf("node-1's agent became ready while the VIP still lands on node-2")
	}
	if n := countEvents(e, "node-1", v1alpha1.ReasonLocalMemberChanged); n != 1 {
		t.Errorf("%d %s Events for one lasting mismatch, want 1", n, v1alpha1.ReasonLocalMemberChanged)
	}
	if after := e.etcdMemberIDs(); !maps.Equal(before, after) {
		t.Fatalf("etcd's members changed from %v to %v", before, after)
	}
	if o := e.get("node-2"); o.Status.MemberID != n2.IDHex() {
		t.Errorf("node-2's object records %s, want %s", o.Status.MemberID, n2.IDHex())
	}

	vip.switchTo(hostPort(t, n1.ClientURL()))
	waitUntil(t, "node-1's agent ready again through the VIP", a.ready)
	if after := e.etcdMemberIDs(); !maps.Equal(before, after) {
		t.Fatalf("etcd's members changed from %v to %v", before, after)
	}
}

// TestOnRemovedExecNeedsEtcdEvidence: an object that says Joined=False/Removed, written by hand
// while the node's etcd is stopped but still a member, does not run the command; a real removal
// then runs it once.
func TestOnRemovedExecNeedsEtcdEvidence(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3, agents: []string{"node-1"}})
	if leader := e.leaderAgent(); leader != "node-1" {
		t.Fatalf("the only agent, node-1, does not lead: %s does", leader)
	}
	runs := filepath.Join(t.TempDir(), "runs")
	target := e.cluster.Member("node-3")
	e.agents[target.Name] = framework.StartAgent(t, target, e.api, e.leastPrivilege(fmt.Sprintf("--on-removed-exec=echo ran >> '%s'", runs))...)
	registered := e.waitFor(target.Name, "Joined", joined)

	target.Stop(t)
	e.setStatus(target.Name, func(s *v1alpha1.EtcdMemberStatus) {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: v1alpha1.ConditionJoined, Status: metav1.ConditionFalse,
			Reason: v1alpha1.ReasonRemoved, Message: "Written by an operator; the member is still in etcd."})
	})
	// Ten syncs: the old agent ran the command at the first.
	if err := framework.Hold(10*time.Second, pollEvery, notCreated(runs)); err != nil {
		t.Fatalf("the command ran on API status alone, its member still in etcd (%v)", err)
	}
	if !e.agentLogsContain("etcd has not confirmed that the local member is gone") {
		t.Errorf("no agent log says why the command did not run")
	}
	if ids := e.etcdMemberIDs(); !ids[target.ID()] {
		t.Fatalf("member %s left etcd during the window", target.IDHex())
	}

	// The operator takes the write back; the member then really leaves.
	e.setStatus(target.Name, func(s *v1alpha1.EtcdMemberStatus) { *s = registered.Status })
	e.leave(target.Name)
	e.waitFor(target.Name, "Left=True/Removed", removedByUs)
	waitUntil(t, "the command ran", func() bool { return len(fileLines(t, runs)) > 0 })
	time.Sleep(3 * time.Second)
	if lines := fileLines(t, runs); len(lines) != 1 {
		t.Fatalf("command ran %d times, want once", len(lines))
	}
	if n := countEvents(e, target.Name, v1alpha1.ReasonOnRemovedExecSucceeded); n != 1 {
		t.Errorf("%d %s Events, want 1", n, v1alpha1.ReasonOnRemovedExecSucceeded)
	}
}

// setStatus changes the object's status as an administrator would, retrying on conflicts with
// the leader's own writes.
func (e *env) setStatus(name string, change func(*v1alpha1.EtcdMemberStatus)) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		m := &v1alpha1.EtcdMember{}
		if err := e.client.Get(ctx, types.NamespacedName{Name: name}, m); err != nil {
			return err
		}
		change(&m.Status)
		return e.client.Status().Update(ctx, m)
	})
	if err != nil {
		e.t.Fatalf("writing the status of %s: %v", name, err)
	}
}

// vipAgent is a node agent run with --etcd-endpoints naming a VIP. framework.StartAgent cannot run
// it: it names the member's own client URL first, and the agent asks the first endpoint.
type vipAgent struct {
	health string
	done   chan struct{}
}

func startVIPAgent(t *testing.T, e *env, m *framework.Member, endpoint string) *vipAgent {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	a := &vipAgent{health: net.JoinHostPort(m.IP(), "9470"), done: make(chan struct{})}
	args := append([]string{
		"serve",
		"--kubeconfig=" + e.agentKubeconfig,
		"--etcd-endpoints=" + endpoint,
		"--name=" + m.Name,
		"--health-probe-bind-address=" + a.health,
		"--metrics-bind-address=" + net.JoinHostPort(m.IP(), "9469"),
	}, framework.TestAgentArgs...)
	cmd := exec.Command(framework.Binary(t, "kubectl-etcdmember"), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the agent: %v", err)
	}
	go func() {
		_ = cmd.Wait()
		close(a.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-a.done
		}
		_ = logFile.Close()
		if t.Failed() {
			if data, err := os.ReadFile(logPath); err == nil {
				t.Logf("agent %s log:\n%s", m.Name, tail(string(data), 6000))
			}
		}
	})
	return a
}

// ready tells whether the agent's /readyz answers 200.
func (a *vipAgent) ready() bool {
	return framework.ReadyzOK("http://"+a.health+"/readyz", 2*time.Second)
}

func (a *vipAgent) waitReady(t *testing.T) {
	t.Helper()
	waitUntil(t, "the agent behind the VIP ready", func() bool {
		select {
		case <-a.done:
			t.Fatalf("the agent behind the VIP exited")
		default:
		}
		return a.ready()
	})
}

// forwarder is a VIP: a TCP forwarder on a loopback address of its own that passes bytes to one
// etcd member's client port, and can be moved to another, as a VIP fails over.
type forwarder struct {
	l      net.Listener
	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
}

func startForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	f := &forwarder{l: listenLoopback(t, 2379), target: target, conns: map[net.Conn]struct{}{}}
	go f.serve()
	t.Cleanup(func() {
		_ = f.l.Close()
		f.closeConns()
	})
	return f
}

func (f *forwarder) addr() string { return f.l.Addr().String() }

// switchTo sends new connections to target and cuts the open ones, as a VIP moving to another
// node does: the gRPC client then reconnects, and lands on target.
func (f *forwarder) switchTo(target string) {
	f.mu.Lock()
	f.target = target
	f.mu.Unlock()
	f.closeConns()
}

func (f *forwarder) closeConns() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		_ = c.Close()
		delete(f.conns, c)
	}
}

func (f *forwarder) serve() {
	for {
		in, err := f.l.Accept()
		if err != nil {
			return
		}
		go f.forward(in)
	}
}

func (f *forwarder) forward(in net.Conn) {
	f.mu.Lock()
	target := f.target
	f.mu.Unlock()
	out, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		_ = in.Close()
		return
	}
	f.mu.Lock()
	f.conns[in], f.conns[out] = struct{}{}, struct{}{}
	f.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
	}
	go pipe(out, in)
	go pipe(in, out)
	wg.Wait()
	f.mu.Lock()
	delete(f.conns, in)
	delete(f.conns, out)
	f.mu.Unlock()
}

// listenLoopback listens on port of a random 127.0.0.0/8 address that nothing else uses; the
// framework reserves it, so that no member or apiserver of a parallel test is given it later.
func listenLoopback(t *testing.T, port int) net.Listener {
	t.Helper()
	return framework.ListenLoopback(t, port)
}

// hostPort returns the host:port of a URL.
func hostPort(t *testing.T, u string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return parsed.Host
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
