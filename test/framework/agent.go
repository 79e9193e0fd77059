package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// agentHealthPort and agentMetricsPort are where each agent serves /healthz and /readyz, and
// /metrics, on its member's loopback address.
const agentHealthPort, agentMetricsPort = 9470, 9469

// agentReadyTimeout bounds an agent's start: it waits for its etcd and registers its member.
const agentReadyTimeout = 30 * time.Second

// TestAgentArgs are the timings the tests run agents with: the production defaults are sized for
// real networks; these keep each scenario to seconds. Per-agent args passed to StartAgent come
// after them and so win.
var TestAgentArgs = []string{
	"--sync-interval=1s",
	"--membership-poll-interval=500ms",
	"--leader-elect-lease-duration=4s",
	"--leader-elect-renew-deadline=3s",
	"--leader-elect-retry-period=500ms",
	"--recheck-interval=1s",
	"--hand-over-retry=10s",
	"--probe-interval=2s",
}

// Agent is a `kubectl-etcdmember serve` process (the node agent) for one member, run from
// bin/failpoints/kubectl-etcdmember (AgentBinary): the shipped code plus internal/failpoint.
type Agent struct {
	Name string

	member  *Member
	api     *APIServer
	proc    *process
	args    []string
	env     []string
	health  string
	metrics string
	// link stands between the agent and its member in a FaultProxies cluster; nil otherwise.
	link *Link
}

// StartAgent starts the agent of member m against api and waits until it is ready (WaitReady).
// The agent reads m's current client URL at every start, so it follows MoveTo. In a FaultProxies
// cluster it reaches m through a link of its own instead (EtcdLink).
func StartAgent(t TB, m *Member, api *APIServer, args ...string) *Agent {
	t.Helper()
	a := NewAgent(t, m, api, args...)
	a.Start(t)
	return a
}

// NewAgent is StartAgent without the start, for an agent a test expects to refuse to start
// (StartUnready).
func NewAgent(t TB, m *Member, api *APIServer, args ...string) *Agent {
	t.Helper()
	var link *Link
	if f := m.c.faults; f != nil {
		// Among the cluster's links: they close at the cleanup of the cluster's owner, which the
		// process below also registers with, later, so the agent is killed first.
		p, addr, err := f.net.newLink("agent "+m.Name, m.IP(), net.JoinHostPort(m.IP(), fmt.Sprint(etcdClientPort)))
		if err != nil {
			t.Fatalf("agent %s: %v", m.Name, err)
		}
		link = &Link{name: "agent " + m.Name + " etcd", url: m.c.scheme() + "://" + addr, p: p}
	}
	a := &Agent{
		Name:    m.Name,
		member:  m,
		api:     api,
		proc:    newProcess(m.c.owner, "agent "+m.Name, filepath.Join(m.dir, "agent.log")),
		args:    args,
		health:  net.JoinHostPort(m.IP(), fmt.Sprint(agentHealthPort)),
		metrics: net.JoinHostPort(m.IP(), fmt.Sprint(agentMetricsPort)),
		link:    link,
	}
	return a
}

func (a *Agent) commandLine() []string {
	args := []string{
		"serve",
		"--kubeconfig=" + a.api.Kubeconfig(),
		"--etcd-endpoints=" + a.EtcdEndpoint(),
		"--name=" + a.member.Name,
		"--health-probe-bind-address=" + a.health,
		"--metrics-bind-address=" + a.metrics,
	}
	if files := a.member.c.TLS(); files != nil {
		args = append(args, "--etcd-cacert="+files.CA, "--etcd-cert="+files.ClientCert, "--etcd-key="+files.ClientKey)
	}
	args = append(args, TestAgentArgs...)
	return append(args, a.args...)
}

// EtcdEndpoint is the agent's --etcd-endpoints as of its next start: its member's ClientURL, or
// the URL of EtcdLink in a FaultProxies cluster.
func (a *Agent) EtcdEndpoint() string {
	if a.link != nil {
		return a.link.URL()
	}
	return a.member.ClientURL()
}

// SetArgs replaces the per-agent args (those given to StartAgent) for the next Start or Restart;
// the running process keeps the ones it started with.
func (a *Agent) SetArgs(args ...string) { a.args = args }

// SetEnv replaces the extra environment variables ("KEY=value") for the next Start or Restart,
// such as internal/failpoint's ETCDMEMBER_FAILPOINT; SetEnv() with none clears them. The running
// process keeps the environment it started with.
func (a *Agent) SetEnv(t TB, kv ...string) {
	t.Helper()
	for _, v := range kv {
		if key, _, ok := strings.Cut(v, "="); !ok || key == "" {
			t.Fatalf("agent %s: environment entry %q is not KEY=value", a.Name, v)
		}
	}
	a.env = kv
}

// launch starts the agent process. Extra environment goes through env(1), which sets it and then
// execs the agent in its own place: the process the framework signals, waits for and reads the
// exit status of is the agent itself, and the log's header shows the variables it ran with.
func (a *Agent) launch(t TB) {
	t.Helper()
	bin, args := Binary(t, AgentBinary), a.commandLine()
	if len(a.env) > 0 {
		envBin, err := exec.LookPath("env")
		if err != nil {
			t.Fatalf("agent %s: env(1) is needed to pass %v: %v", a.Name, a.env, err)
		}
		args = append(append(append([]string{}, a.env...), bin), args...)
		bin = envBin
	}
	if err := a.proc.start(bin, args...); err != nil {
		t.Fatalf("%v", err)
	}
}

// Start starts the agent (again) and waits until it is ready (WaitReady).
func (a *Agent) Start(t TB) {
	t.Helper()
	a.launch(t)
	a.WaitReady(t)
}

// StartUnready starts the agent without waiting for it to be ready: for agents whose member is
// gone or not started yet, and for agents started together, each waited for afterwards.
func (a *Agent) StartUnready(t TB) {
	t.Helper()
	a.launch(t)
}

// WaitReady waits until the agent's /readyz answers 200: its last sync found its member in etcd
// and recorded in an object, whether the agent created that object or the leader did
// (WaitOwnObject tells them apart).
func (a *Agent) WaitReady(t TB) {
	t.Helper()
	url := "http://" + a.health + "/readyz"
	a.proc.waitReady(t, agentReadyTimeout, "agent "+a.Name+" ready at "+url, func(ctx context.Context) error {
		return getOK(ctx, url)
	})
}

// ReadyzOK tells whether an agent's readiness URL answers 200 within timeout (see WaitReady).
func ReadyzOK(url string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return getOK(ctx, url) == nil
}

func getOK(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz: %s", resp.Status)
	}
	return nil
}

// Stop sends SIGTERM and waits for the agent to exit.
func (a *Agent) Stop(t TB) {
	t.Helper()
	if err := a.proc.stop(); err != nil {
		t.Fatalf("%v", err)
	}
}

// Kill sends SIGKILL: the agent cannot release its Lease.
func (a *Agent) Kill(t TB) {
	t.Helper()
	if err := a.proc.kill(); err != nil {
		t.Fatalf("%v", err)
	}
}

// Pause freezes the agent with SIGSTOP: a leader keeps believing it leads while its Lease runs
// out, and carries on from where it stopped once resumed. An agent that has exited answers nothing
// either, so that is no error.
func (a *Agent) Pause(t TB) {
	t.Helper()
	if err := a.proc.signal(syscall.SIGSTOP); err != nil && !errors.Is(err, errNotRunning) {
		t.Fatalf("pause agent %s: %v", a.Name, err)
	}
}

// Resume continues a paused agent with SIGCONT; one that has exited has nothing to continue.
func (a *Agent) Resume(t TB) {
	t.Helper()
	if err := a.proc.signal(syscall.SIGCONT); err != nil && !errors.Is(err, errNotRunning) {
		t.Fatalf("resume agent %s: %v", a.Name, err)
	}
}

// Exited reports whether the agent's last run has ended, and its exit code: -1 when a signal
// ended it, so that a test can tell a crash it asked for (a failpoint's code) from any other.
func (a *Agent) Exited() (code int, exited bool) {
	a.proc.mu.Lock()
	defer a.proc.mu.Unlock()
	if a.proc.done == nil || !isClosed(a.proc.done) {
		return 0, false
	}
	var exitErr *exec.ExitError
	if errors.As(a.proc.exitErr, &exitErr) {
		return exitErr.ExitCode(), true
	}
	return 0, true
}

// Restart stops the agent and starts it again.
func (a *Agent) Restart(t TB) {
	t.Helper()
	a.Stop(t)
	a.Start(t)
}

// Running reports whether the agent process is alive.
func (a *Agent) Running() bool { return a.proc.running() }

// LogFile is the agent's log, kept across restarts.
func (a *Agent) LogFile() string { return a.proc.logPath }

// LogCount counts the occurrences of text in the agent's log, across its restarts.
func (a *Agent) LogCount(text string) (int, error) {
	data, err := os.ReadFile(a.LogFile())
	if err != nil {
		return 0, fmt.Errorf("reading the log of agent %s: %w", a.Name, err)
	}
	return strings.Count(string(data), text), nil
}

// MetricsAddr is the host:port the agent serves its metrics on (over HTTPS when started with
// --metrics-secure).
func (a *Agent) MetricsAddr() string { return a.metrics }

// MetricsURL is the agent's Prometheus endpoint over plain HTTP, as it serves it on loopback by
// default.
func (a *Agent) MetricsURL() string { return "http://" + a.metrics + "/metrics" }

// HealthURL is the agent's endpoint for path (healthz or readyz).
func (a *Agent) HealthURL(path string) string { return "http://" + a.health + "/" + path }
