package framework

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// AgentSelector selects the agent pods of deploy/'s manifests, the DaemonSet's and the static pod.
const AgentSelector = "app.kubernetes.io/name=etcdmember-agent"

// agentWatchEvery is how often the agent pods' statuses are read for restarts. The kubelet keeps
// one dead container per container, so the previous container's log is still there at the next
// read.
const agentWatchEvery = time.Second

// AgentPods is every agent pod a tier of real kubelets saw, from the watch's start to the test's
// end, with the latest status the kubelets reported: a restart counts even in a pod deleted later
// (a rolling update's, the DaemonSet's that a static pod replaces). An agent exits only when it is
// killed or cannot start, never as a leader that lost its Lease (it stands by and campaigns
// again), so a test expects no restart unless it says why (issue #48).
type AgentPods struct {
	t  errorTB
	cs kubernetes.Interface
	// logDirs is each node's podLogsDir by node name, read when it is needed: a tier may add
	// nodes after the watch starts.
	logDirs func() map[string]string

	mu   sync.Mutex
	pods map[types.UID]*corev1.Pod
	// want is the number of restarts the test causes on purpose, with why; -1 while it cannot
	// count them yet.
	want int32
	why  string
}

// WatchAgentPods follows the agent pods (AgentSelector) of kube-system until the test ends, and
// reports each restart with how the previous container ended and what it wrote. At the end it
// checks their restarts against ExpectRestarts (none unless said) and, when the test failed,
// prints every agent container's log on every node. Started once the kubelets run, its cleanup
// runs before theirs and the apiserver's.
func WatchAgentPods(t errorTB, cs kubernetes.Interface, logDirs func() map[string]string) *AgentPods {
	w := &AgentPods{t: t, cs: cs, logDirs: logDirs, pods: map[types.UID]*corev1.Pod{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(agentWatchEvery)
		defer tick.Stop()
		for {
			w.observe(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		// A restart just before the end counts too.
		w.observe(context.Background())
		w.check()
		if t.Failed() {
			t.Logf("the agent containers' logs on every kubelet node, last %d lines of each:\n%s", LogTailLines, w.Logs())
		}
	})
	return w
}

// errorTB is a test that can fail without stopping: the watch's verdict comes in a cleanup.
type errorTB interface {
	TB
	Errorf(format string, args ...any)
}

// ExpectRestarts says that the test restarts agent containers on purpose, why, and how many times
// in all its agent pods: the watch checks that count, exactly, at the end. n < 0 lets any number
// pass until the test can count them and says so again.
func (w *AgentPods) ExpectRestarts(n int32, why string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.want, w.why = n, why
}

// observe records the agent pods' statuses and reports each restart it sees for the first time.
// A failed read is skipped (the test may have paused the apiserver): the next one sees the same
// restarts.
func (w *AgentPods) observe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pods, err := w.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: AgentSelector})
	if err != nil {
		return
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		w.mu.Lock()
		before := w.pods[p.UID]
		w.pods[p.UID] = p
		w.mu.Unlock()
		for _, c := range p.Status.ContainerStatuses {
			if seen := containerRestarts(before, c.Name); c.RestartCount > seen {
				w.t.Logf("%s", w.restartReport(p, c, seen))
			}
		}
	}
}

// containerRestarts is the restart count of p's container name, 0 for a pod not seen before.
func containerRestarts(p *corev1.Pod, name string) int32 {
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

// PodReady tells whether p's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// MetricsTarget is where an agent pod serves /metrics, as the shipped manifests put it and a
// PodMonitor finds it: the pod's host IP ($(HOST_IP), the node's address) and its container's
// port named metrics. It fails t when the pod declares none.
func MetricsTarget(t TB, pod *corev1.Pod) string {
	t.Helper()
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == "metrics" {
				return net.JoinHostPort(pod.Status.HostIP, strconv.Itoa(int(p.ContainerPort)))
			}
		}
	}
	t.Fatalf("agent pod %s declares no port named metrics: %+v", pod.Name, pod.Spec.Containers)
	return ""
}

// PodRestarts is the sum of the restart counts of p's containers.
func PodRestarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// restartReport says how the previous container of c ended, as the kubelet recorded it, and what
// it wrote.
func (w *AgentPods) restartReport(p *corev1.Pod, c corev1.ContainerStatus, seen int32) string {
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
	dir, ok := w.logDirs()[p.Spec.NodeName]
	if !ok {
		fmt.Fprintf(&b, "\nthe previous container's log: %q is no kubelet node of the tier", p.Spec.NodeName)
		return b.String()
	}
	path := ContainerLogPath(dir, p, c.Name, c.RestartCount-1)
	fmt.Fprintf(&b, "\n--- %s (the previous container's log, last %d lines)\n%s", path, LogTailLines, LogTail(c.Name, path, LogTailLines))
	return b.String()
}

// check fails the test unless its agent containers restarted exactly as often as it expects.
func (w *AgentPods) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	var total int32
	var each []string
	for _, p := range w.pods {
		if n := PodRestarts(p); n > 0 {
			total += n
			each = append(each, fmt.Sprintf("%s on %s: %d", p.Name, p.Spec.NodeName, n))
		}
	}
	if w.want < 0 || total == w.want {
		return
	}
	slices.Sort(each)
	if w.why == "" {
		w.t.Errorf("agent containers restarted %d times (%s), want none: nothing in this test restarts them; each restart is reported above with its previous container's log",
			total, strings.Join(each, "; "))
		return
	}
	w.t.Errorf("agent containers restarted %d times (%s), want exactly %d: %s", total, strings.Join(each, "; "), w.want, w.why)
}

// Logs is what every agent container wrote on every node, from the kubelets' podLogsDir: the
// last LogTailLines of each container's log, previous containers' included.
func (w *AgentPods) Logs() string {
	dirs := w.logDirs()
	nodes := make([]string, 0, len(dirs))
	for name := range dirs {
		nodes = append(nodes, name)
	}
	slices.Sort(nodes)
	var b strings.Builder
	for _, node := range nodes {
		// A log the kubelet removes meanwhile (a dead container collected) is said so, and the
		// walk goes on.
		_ = filepath.WalkDir(dirs[node], func(path string, d fs.DirEntry, err error) error {
			switch {
			case errors.Is(err, fs.ErrNotExist):
				return nil
			case err != nil:
				fmt.Fprintf(&b, "--- %s (node %s): %v\n", path, node, err)
				return nil
			case d.IsDir() || !strings.Contains(path, "etcdmember-agent"):
				return nil
			}
			fmt.Fprintf(&b, "--- %s (node %s)\n%s", path, node, LogTail(node, path, LogTailLines))
			return nil
		})
	}
	return b.String()
}

// ContainerLogPath is where a kubelet with podLogsDir dir keeps the log of pod's container as it
// ran after restarts restarts: <podLogsDir>/<namespace>_<pod>_<uid>/<container>/<restarts>.log,
// under a static pod's own UID rather than its mirror pod's. The kubelet keeps the last dead
// container's log beside the running one's, and removes older ones as it collects their
// containers.
func ContainerLogPath(dir string, pod *corev1.Pod, container string, restarts int32) string {
	uid := string(pod.UID)
	if static := pod.Annotations[corev1.MirrorPodAnnotationKey]; static != "" {
		uid = static
	}
	return filepath.Join(dir, pod.Namespace+"_"+pod.Name+"_"+uid, container, fmt.Sprintf("%d.log", restarts))
}

// PodEvent waits up to timeout for an Event in kube-system about the pod whose message contains
// want, and returns it.
func PodEvent(t TB, cs kubernetes.Interface, timeout, interval time.Duration, pod, want string) corev1.Event {
	t.Helper()
	var found corev1.Event
	Eventually(t, timeout, interval, "an Event about "+pod+" naming "+want, func(ctx context.Context) (bool, error) {
		evs, err := cs.CoreV1().Events("kube-system").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, err
		}
		var seen []string
		for _, ev := range evs.Items {
			if strings.Contains(ev.Message, want) {
				found = ev
				return true, nil
			}
			seen = append(seen, ev.Reason+": "+ev.Message)
		}
		return false, fmt.Errorf("its Events: %v", seen)
	})
	return found
}
