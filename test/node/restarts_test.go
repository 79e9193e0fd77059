package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

const (
	// watchEvery is how often the agent pods' statuses are read for restarts. The kubelet keeps
	// one dead container per container, so the previous container's log is still there at the
	// next read.
	watchEvery = time.Second
	// logTail is how much of each container log a restart or a failure prints, as the framework
	// prints its processes' logs.
	logTail = 150
)

// agentWatch is every agent pod the tier saw, from its start to the test's end, with the latest
// status the kubelets reported: a restart counts even in a pod deleted later (a rolling update's,
// the DaemonSet's that a static pod replaces). An agent exits only when it is killed or cannot
// start, never as a leader that lost its Lease (it stands by and campaigns again), so a test
// expects no restart unless it says why.
type agentWatch struct {
	mu   sync.Mutex
	pods map[types.UID]*corev1.Pod
	// want is the number of restarts the test causes on purpose, with why; -1 while it cannot
	// count them yet.
	want int32
	why  string
}

// expectRestarts says that the test restarts agent containers on purpose, why, and how many times
// in all its agent pods: the tier checks that count, exactly, at the end. n < 0 lets any number
// pass until the test can count them and says so again.
func (tr *tier) expectRestarts(n int32, why string) {
	tr.watch.mu.Lock()
	defer tr.watch.mu.Unlock()
	tr.watch.want, tr.watch.why = n, why
}

// watchAgents follows the agent pods until the test ends; then it checks their restarts against
// expectRestarts and, when the test failed, prints every agent container's log on every kubelet
// node. Called once the kubelet nodes run, its cleanup runs before theirs and the apiserver's.
func (tr *tier) watchAgents() {
	tr.watch.pods = map[types.UID]*corev1.Pod{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(watchEvery)
		defer tick.Stop()
		for {
			tr.observeAgents(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	tr.t.Cleanup(func() {
		cancel()
		<-done
		// A restart just before the end counts too.
		tr.observeAgents(context.Background())
		tr.checkRestarts()
		if tr.t.Failed() {
			tr.t.Logf("the agent containers' logs on every kubelet node, last %d lines of each:\n%s", logTail, tr.agentLogs(logTail))
		}
	})
}

// observeAgents records the agent pods' statuses and reports each restart it sees for the first
// time. A failed read is skipped (the test may have paused the apiserver): the next one sees the
// same restarts.
func (tr *tier) observeAgents(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	pods, err := tr.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: agentLabel})
	if err != nil {
		return
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		tr.watch.mu.Lock()
		before := tr.watch.pods[p.UID]
		tr.watch.pods[p.UID] = p
		tr.watch.mu.Unlock()
		for _, c := range p.Status.ContainerStatuses {
			if seen := restartsOf(before, c.Name); c.RestartCount > seen {
				tr.t.Log(tr.restartReport(p, c, seen))
			}
		}
	}
}

// restartsOf is the restart count of p's container name, 0 for a pod not seen before.
func restartsOf(p *corev1.Pod, name string) int32 {
	if p == nil {
		return 0
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == name {
			return c.RestartCount
		}
	}
	return 0
}

// restartReport says how the previous container of c ended, as the kubelet recorded it, and what
// it wrote.
func (tr *tier) restartReport(p *corev1.Pod, c corev1.ContainerStatus, seen int32) string {
	var b strings.Builder
	fmt.Fprintf(&b, "agent pod %s on %s: container %s restarted (restarts %d, %d before)", p.Name, p.Spec.NodeName, c.Name, c.RestartCount, seen)
	if last := c.LastTerminationState.Terminated; last != nil {
		fmt.Fprintf(&b, "; the previous container exited with code %d, reason %q, at %s", last.ExitCode, last.Reason,
			last.FinishedAt.Format(time.RFC3339))
		if last.Message != "" {
			fmt.Fprintf(&b, ": %s", last.Message)
		}
	} else {
		b.WriteString("; the kubelet records no termination of the previous container")
	}
	node := tr.kubeletNode(p.Spec.NodeName)
	if node == nil {
		fmt.Fprintf(&b, "\nthe previous container's log: %q is no kubelet node of the tier", p.Spec.NodeName)
		return b.String()
	}
	path := node.ContainerLog(p, c.Name, c.RestartCount-1)
	if data, err := os.ReadFile(path); err != nil {
		fmt.Fprintf(&b, "\nthe previous container's log: %v", err)
	} else {
		fmt.Fprintf(&b, "\n--- %s (the previous container's log, last %d lines)\n%s", path, logTail, tail(data, logTail))
	}
	return b.String()
}

// checkRestarts fails the test unless its agent containers restarted exactly as often as it
// expects.
func (tr *tier) checkRestarts() {
	tr.watch.mu.Lock()
	defer tr.watch.mu.Unlock()
	var total int32
	var each []string
	for _, p := range tr.watch.pods {
		if n := restarts(p); n > 0 {
			total += n
			each = append(each, fmt.Sprintf("%s on %s: %d", p.Name, p.Spec.NodeName, n))
		}
	}
	want := tr.watch.want
	if want < 0 || total == want {
		return
	}
	slices.Sort(each)
	if tr.watch.why == "" {
		tr.t.Errorf("agent containers restarted %d times (%s), want none: nothing in this test restarts them; each restart is reported above with its previous container's log",
			total, strings.Join(each, "; "))
		return
	}
	tr.t.Errorf("agent containers restarted %d times (%s), want exactly %d: %s", total, strings.Join(each, "; "), want, tr.watch.why)
}

// kubeletNode is the tier's kubelet node name, or nil.
func (tr *tier) kubeletNode(name string) *framework.KubeletNode {
	for _, n := range tr.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// agentLogs is what every agent container wrote on every kubelet node, from the kubelets'
// podLogsDir: the last lines of each container's log, previous containers' included.
func (tr *tier) agentLogs(lines int) string {
	var b strings.Builder
	for _, n := range tr.nodes {
		// A log the kubelet removes meanwhile (a dead container collected) is said so, and the
		// walk goes on.
		_ = filepath.WalkDir(n.PodLogDir(), func(path string, d fs.DirEntry, err error) error {
			switch {
			case errors.Is(err, fs.ErrNotExist):
				return nil
			case err != nil:
				fmt.Fprintf(&b, "--- %s (node %s): %v\n", path, n.Name, err)
				return nil
			case d.IsDir() || !strings.Contains(path, "etcdmember-agent"):
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				fmt.Fprintf(&b, "--- %s (node %s): %v\n", path, n.Name, err)
				return nil
			}
			fmt.Fprintf(&b, "--- %s (node %s)\n%s\n", path, n.Name, tail(data, lines))
			return nil
		})
	}
	return b.String()
}

// tail is the last n lines of data.
func tail(data []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
