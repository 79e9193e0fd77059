//go:build bench

package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// The agent pod's cost under the kubelet, as the kubelet itself reports it (its summary API, which
// metrics-server and `kubectl top` read), against the manifest's requests and limits.
const (
	// benchReportEnv names a file for the markdown section; without it the section is only logged.
	benchReportEnv = "BENCH_NODE_REPORT"
	// benchWindow is each measured window; benchSampleEvery how often the summary is read. A read
	// returns the kubelet's latest sample, which may be one an earlier read returned: the report
	// counts the distinct ones and the time between them. benchCgroupEvery is how often the
	// container's memory cgroup is read directly, for the peaks between two of the kubelet's samples.
	benchWindow      = time.Minute
	benchSampleEvery = 2 * time.Second
	benchCgroupEvery = 100 * time.Millisecond
	// benchWarmup lets the agents settle after a start before a window.
	benchWarmup = 30 * time.Second
	// benchLeaveAt is when in its window the leave is asked for.
	benchLeaveAt = 10 * time.Second
	// benchNodes is how many Nodes the sweep window's new leader lists, as in test/bench's many
	// section; BENCH_MANY_NODES overrides it for trial runs.
	benchNodes    = 5000
	benchNodesEnv = "BENCH_MANY_NODES"
	// benchCreateWorkers and benchCreateQPS pace the Nodes' creation, as test/bench does.
	benchCreateWorkers = 16
	benchCreateQPS     = 1000
	// benchPeakGoal is the goal: the working set's peak at most this share of the memory limit.
	benchPeakGoal  = 0.75
	agentContainer = "agent"
)

// TestBenchAgentPod measures the shipped agent image under the kubelet: the image's size, the time
// from `kubectl apply` of deploy/daemonset to the pod Ready, and the pod's working set and CPU from
// the kubelet's summary API over a quiet minute, the minute of another member's leave, and the
// minute in which the pod agent becomes the leader with 5,000 more Nodes to sweep. It fails when
// the working set's peak exceeds benchPeakGoal of the manifest's memory limit.
func TestBenchAgentPod(t *testing.T) {
	b := &podBench{started: time.Now(), loadStart: loadAvg(), nodes: benchNodes}
	if v := os.Getenv(benchNodesEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", benchNodesEnv, v, err)
		}
		b.nodes = n
	}
	tr := newTier(t)
	b.tr = tr

	applied := tr.applyDaemonSet(tr.node.AgentImage)
	pod := tr.agentPod("Ready", framework.PodReady)
	b.readySeen = time.Since(applied)
	b.readyCondition = readySince(pod).Sub(applied)
	if leader := tr.api.LeaderAgent(t); leader != tr.podIdentity() {
		t.Fatalf("the leader is %s, not the pod agent of %s (%s)", leader, tr.node.Name, tr.podIdentity())
	}
	b.pod = pod.Name
	b.resources(pod)
	b.imageSizes()
	b.stats = tr.node.Stats(t)
	// The kubelet has stats for a container only from its first housekeeping after the start.
	framework.Eventually(t, settle, time.Second, "the agent container in the kubelet's summary", framework.Succeeds(func(ctx context.Context) error {
		_, err := b.stats.Pod(ctx, "kube-system", b.pod)
		return err
	}))
	agents := b.hostAgents("node-2", "node-3")

	time.Sleep(benchWarmup)
	b.windows = append(b.windows, b.window("quiet minute (pod agent leads, 2 host agents)", benchWindow, nil))

	b.windows = append(b.windows, b.window("minute of node-3's leave", benchWindow, func() {
		time.Sleep(benchLeaveAt)
		start := time.Now()
		tr.leave("node-3")
		b.leaveTook = time.Since(start)
		if leader := tr.api.LeaderAgent(t); leader != tr.podIdentity() {
			t.Fatalf("the leader after node-3's leave is %s, not the pod agent", leader)
		}
	}))

	start := time.Now()
	b.createNodes()
	b.created = time.Since(start)
	b.handOff()
	time.Sleep(benchWarmup)
	listsBefore := b.nodeLists()
	b.windows = append(b.windows, b.window(fmt.Sprintf("minute of a new leader's sweep (%d more Nodes)", b.nodes), benchWindow, func() {
		stopped := time.Now()
		for _, a := range agents {
			a.Stop(t)
		}
		b.takeover = b.waitLeader(tr.podIdentity()).Sub(stopped)
	}))
	b.sweepLists = b.nodeLists() - listsBefore
	if leader := tr.api.LeaderAgent(t); leader != tr.podIdentity() {
		t.Errorf("the leader at the end of the sweep window is %s, not the pod agent", leader)
	}
	b.loadEnd = loadAvg()
	b.elapsed = time.Since(b.started)

	section := b.markdown()
	t.Log("\n" + section)
	if path := os.Getenv(benchReportEnv); path != "" {
		if err := os.WriteFile(path, []byte(section), 0o644); err != nil {
			t.Errorf("writing %s: %v", path, err)
		}
	}
	if peak, goal := b.peak(), benchPeakGoal*float64(b.memLimit); float64(peak) > goal {
		t.Errorf("the agent pod's working set peaked at %.1f MiB, above %.0f %% of its %s limit (%.1f MiB)",
			mebibytes(peak), 100*benchPeakGoal, resource.NewQuantity(b.memLimit, resource.BinarySI), mebibytes(uint64(goal)))
	}
}

// podBench is one run: what was measured, and how.
type podBench struct {
	tr    *tier
	stats *framework.KubeletStats
	pod   string
	nodes int

	started              time.Time
	elapsed              time.Duration
	loadStart, loadEnd   string
	readySeen            time.Duration
	readyCondition       time.Duration
	imageTar, imageCRI   int64
	cpuRequest           int64 // millicores
	memRequest, memLimit int64 // bytes
	leaveTook            time.Duration
	created              time.Duration
	takeover             time.Duration
	sweepLists           float64
	windows              []benchWindowResult
}

// benchWindowResult is one window: the kubelet's distinct samples of the agent container, and the
// memory cgroup's own peak over the window.
type benchWindowResult struct {
	name      string
	reads     int
	errors    []string
	samples   []framework.ContainerUsage
	restarted bool
	// cgroupPeak is the container's memory cgroup's max_usage_in_bytes, reset at the window's
	// start: page cache included, and between the kubelet's samples too. cgroupWorkingSet is the
	// highest working set read from the cgroup every benchCgroupEvery, computed as the kubelet's
	// cadvisor does (usage less total_inactive_file). 0 when unknown.
	cgroupPeak, cgroupWorkingSet uint64
	cgroupNote                   string
	loadStart, loadEnd           string
}

// resources reads the agent container's requests and limits from the pod, as applied.
func (b *podBench) resources(pod *corev1.Pod) {
	for _, c := range pod.Spec.Containers {
		if c.Name == agentContainer {
			b.cpuRequest = c.Resources.Requests.Cpu().MilliValue()
			b.memRequest = c.Resources.Requests.Memory().Value()
			b.memLimit = c.Resources.Limits.Memory().Value()
		}
	}
	if b.memLimit == 0 {
		b.tr.t.Fatalf("the agent container of %s has no memory limit: %+v", pod.Name, pod.Spec.Containers)
	}
}

// imageSizes is the size of make image's archive and of the image as containerd reports it to the
// kubelet (Node.status.images: the CRI's size, its compressed layers).
func (b *podBench) imageSizes() {
	t := b.tr.t
	root, _ := framework.RepoRoot()
	fi, err := os.Stat(filepath.Join(root, "dist", "image_linux_"+runtime.GOARCH+".tar"))
	if err != nil {
		t.Fatal(err)
	}
	b.imageTar = fi.Size()
	framework.Eventually(t, settle, pollEvery, "the agent image in Node "+b.tr.node.Name+"'s status", func(ctx context.Context) (bool, error) {
		node, err := b.tr.cs.CoreV1().Nodes().Get(ctx, b.tr.node.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, img := range node.Status.Images {
			if slices.Contains(img.Names, b.tr.node.AgentImage) {
				b.imageCRI = img.SizeBytes
				return true, nil
			}
		}
		return false, nil
	})
}

// hostAgents is tier.hostAgents, keeping the agents to stop them later.
func (b *podBench) hostAgents(names ...string) []*framework.Agent {
	tr := b.tr
	_, kubeconfig := tr.api.User(tr.t, "etcdmember-agent", "etcdmember:agents")
	var agents []*framework.Agent
	for _, name := range names {
		agents = append(agents, framework.StartAgent(tr.t, tr.nc.Cluster.Member(name), tr.api, "--kubeconfig="+kubeconfig))
	}
	return agents
}

// window samples the agent container for d while during runs (nil: a quiet window).
func (b *podBench) window(name string, d time.Duration, during func()) benchWindowResult {
	t := b.tr.t
	w := benchWindowResult{name: name, loadStart: loadAvg()}
	cgroup, err := b.resetCgroupPeak()
	if err != nil {
		w.cgroupNote = err.Error()
	}
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { b.sample(ctx, &w) })
	if cgroup != "" {
		wg.Go(func() { w.cgroupWorkingSet = pollWorkingSet(ctx, cgroup) })
	}
	if during != nil {
		during()
	}
	time.Sleep(time.Until(start.Add(d)))
	cancel()
	wg.Wait()
	if cgroup != "" {
		if w.cgroupPeak, err = readUint(filepath.Join(cgroup, "memory.max_usage_in_bytes")); err != nil {
			w.cgroupNote = err.Error()
		}
	}
	w.loadEnd = loadAvg()
	t.Logf("%s: %d reads, %d distinct kubelet samples, %d errors %v; working set %s; cgroup: working set peak %.1f MiB, usage peak %.1f MiB %s",
		name, w.reads, len(w.samples), len(w.errors), w.errors, w.workingSet(), mebibytes(w.cgroupWorkingSet), mebibytes(w.cgroupPeak), w.cgroupNote)
	return w
}

// sample reads the summary every benchSampleEvery until ctx ends, keeping each distinct sample of
// the kubelet's once.
func (b *podBench) sample(ctx context.Context, w *benchWindowResult) {
	tick := time.NewTicker(benchSampleEvery)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, callTimeout)
		usage, err := b.stats.Pod(rctx, "kube-system", b.pod)
		cancel()
		if ctx.Err() != nil {
			return
		}
		w.reads++
		if err == nil {
			err = w.add(usage)
		}
		if err != nil && len(w.errors) < 5 {
			w.errors = append(w.errors, err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (w *benchWindowResult) add(usage []framework.ContainerUsage) error {
	i := slices.IndexFunc(usage, func(u framework.ContainerUsage) bool { return u.Name == agentContainer })
	if i < 0 {
		return errors.New("no agent container in the summary")
	}
	u := usage[i]
	if n := len(w.samples); n > 0 {
		last := w.samples[n-1]
		if last.MemoryTime.Equal(u.MemoryTime) && last.UsageCoreNanoSeconds == u.UsageCoreNanoSeconds && last.WorkingSetBytes == u.WorkingSetBytes {
			return nil
		}
		if !last.Started.Equal(u.Started) {
			w.restarted = true
		}
	}
	w.samples = append(w.samples, u)
	return nil
}

// workingSet is min/p50/max of the window's samples, in MiB.
func (w *benchWindowResult) workingSet() string {
	if len(w.samples) == 0 {
		return "no samples"
	}
	ws := w.sortedWorkingSets()
	return fmt.Sprintf("%.1f / %.1f / %.1f", mebibytes(ws[0]), mebibytes(ws[len(ws)/2]), mebibytes(ws[len(ws)-1]))
}

func (w *benchWindowResult) sortedWorkingSets() []uint64 {
	var ws []uint64
	for _, s := range w.samples {
		ws = append(ws, s.WorkingSetBytes)
	}
	slices.Sort(ws)
	return ws
}

// cpu is the window's mean CPU (the CPU time between its first and last samples over the time
// between them) and the highest of the kubelet's rates, in millicores.
func (w *benchWindowResult) cpu() (mean, highest float64, ok bool) {
	if len(w.samples) < 2 || w.restarted {
		return 0, 0, false
	}
	first, last := w.samples[0], w.samples[len(w.samples)-1]
	if d := last.CPUTime.Sub(first.CPUTime); d > 0 {
		mean = float64(last.UsageCoreNanoSeconds-first.UsageCoreNanoSeconds) / float64(d) * 1000
	}
	for _, s := range w.samples {
		highest = max(highest, float64(s.UsageNanoCores)/1e6)
	}
	return mean, highest, true
}

// intervals is the median and largest time between two distinct samples of the kubelet's.
func (b *podBench) intervals() (median, largest time.Duration) {
	var gaps []time.Duration
	for _, w := range b.windows {
		for i := 1; i < len(w.samples); i++ {
			gaps = append(gaps, w.samples[i].MemoryTime.Sub(w.samples[i-1].MemoryTime))
		}
	}
	if len(gaps) == 0 {
		return 0, 0
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2], gaps[len(gaps)-1]
}

// peak is the highest working set of every window: the kubelet's, or the cgroup's read between
// the kubelet's samples.
func (b *podBench) peak() uint64 {
	var p uint64
	for _, w := range b.windows {
		p = max(p, w.cgroupWorkingSet)
		for _, s := range w.samples {
			p = max(p, s.WorkingSetBytes)
		}
	}
	return p
}

// resetCgroupPeak finds the agent container's memory cgroup (cgroup v1) and resets its
// max_usage_in_bytes, so that it holds the window's peak at the window's end.
func (b *podBench) resetCgroupPeak() (string, error) {
	pod := b.tr.agentPod("running", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	pid := b.tr.node.ContainerPID(b.tr.t, pod.Status.ContainerStatuses[0].ContainerID)
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "memory") {
			dir := filepath.Join("/sys/fs/cgroup/memory", parts[2])
			if err := os.WriteFile(filepath.Join(dir, "memory.max_usage_in_bytes"), []byte("0"), 0o644); err != nil {
				return "", fmt.Errorf("resetting the cgroup's peak: %w", err)
			}
			return dir, nil
		}
	}
	return "", errors.New("no cgroup v1 memory controller: no cgroup peak")
}

// pollWorkingSet reads the memory cgroup's working set every benchCgroupEvery until ctx ends, and
// returns the highest.
func pollWorkingSet(ctx context.Context, cgroup string) uint64 {
	tick := time.NewTicker(benchCgroupEvery)
	defer tick.Stop()
	var peak uint64
	for {
		if ws, err := cgroupWorkingSet(cgroup); err == nil {
			peak = max(peak, ws)
		}
		select {
		case <-ctx.Done():
			return peak
		case <-tick.C:
		}
	}
}

// cgroupWorkingSet is a v1 memory cgroup's usage less its inactive file pages, as cadvisor
// computes the working set.
func cgroupWorkingSet(cgroup string) (uint64, error) {
	usage, err := readUint(filepath.Join(cgroup, "memory.usage_in_bytes"))
	if err != nil {
		return 0, err
	}
	data, err := os.ReadFile(filepath.Join(cgroup, "memory.stat"))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "total_inactive_file "); ok {
			inactive, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, err
			}
			if inactive > usage {
				return 0, nil
			}
			return usage - inactive, nil
		}
	}
	return 0, fmt.Errorf("%s/memory.stat: no total_inactive_file", cgroup)
}

func readUint(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
}

// createNodes creates b.nodes Nodes as kubelets register theirs (framework.WorkerNode).
func (b *podBench) createNodes() {
	b.tr.api.CreateWorkerNodes(b.tr.t, b.nodes, benchCreateWorkers, benchCreateQPS)
}

// handOff moves leadership from the pod agent to a host agent, as a restart of the leader's pod
// does: SIGTERM to the agent (it releases the Lease), which the kubelet restarts as a follower.
func (b *podBench) handOff() {
	tr := b.tr
	pod := tr.agentPod("Ready", framework.PodReady)
	before := framework.PodRestarts(pod)
	tr.agents.ExpectRestarts(before+1, "handOff SIGTERMs the leading pod agent once, so that a host agent takes the Lease")
	pid := tr.node.ContainerPID(tr.t, pod.Status.ContainerStatuses[0].ContainerID)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		tr.t.Fatalf("SIGTERM %d: %v", pid, err)
	}
	tr.agentPod("Ready again", func(p *corev1.Pod) bool { return framework.PodReady(p) && framework.PodRestarts(p) > before })
	if leader := tr.api.LeaderAgent(tr.t); leader == tr.podIdentity() {
		tr.t.Fatalf("the restarted pod agent leads again: no new term to measure")
	}
}

// waitLeader waits for identity to hold the leader Lease and returns when it was seen.
func (b *podBench) waitLeader(identity string) time.Time {
	tr := b.tr
	framework.Eventually(tr.t, settle, pollEvery, identity+" holding the leader Lease", func(ctx context.Context) (bool, error) {
		lease, err := tr.cs.CoordinationV1().Leases("kube-system").Get(ctx, v1alpha1.LeaseName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return framework.LeaseHolder(lease) == identity, nil
	})
	return time.Now()
}

// nodeLists is the apiserver's count of LIST requests for Nodes, from every client.
func (b *podBench) nodeLists() float64 {
	t := b.tr.t
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	data, err := b.tr.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("apiserver metrics: %v", err)
	}
	var n float64
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `resource="nodes"`) &&
			strings.Contains(line, `verb="LIST"`) && strings.Contains(line, `subresource=""`) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("apiserver metrics: %q: %v", line, err)
			}
			n += v
		}
	}
	return n
}

// markdown is the run's section of the report.
func (b *podBench) markdown() string {
	var s strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&s, format+"\n", args...) }
	limit := resource.NewQuantity(b.memLimit, resource.BinarySI)
	median, largest := b.intervals()
	p("# Benchmarks: the agent pod under a real kubelet")
	p("")
	p("Written by `make bench` (`TestBenchAgentPod`, test/node/bench_test.go); the other sections are in [BENCHMARKS.md](BENCHMARKS.md).")
	p("")
	p("## The agent pod under a real kubelet (node tier)")
	p("")
	p("Measured %s by `TestBenchAgentPod` (test/node/bench_test.go) in %s, on %d CPUs; load average (1, 5, 15 min) %s at the start and %s at the end: other tests may have shared the machine.",
		b.started.UTC().Format("2006-01-02 15:04 MST"), b.elapsed.Round(time.Second), runtime.NumCPU(), b.loadStart, b.loadEnd)
	p("The image of `make image`, imported into the node's containerd, runs as deploy/daemonset ships it (only the image reference changed, the agent's default timings), on node-1 of three TLS etcd members; node-2's and node-3's agents run as host processes with the tests' timings.")
	p("Working set and CPU are the kubelet's (`/stats/summary`, what metrics-server and `kubectl top` read), read every %s: its samples were %s apart (median; at most %s), one-second timestamps, so a peak shorter than that can fall between two of them. The cgroup columns read the container's memory cgroup directly: its working set every %s, computed as the kubelet's cadvisor does (`memory.usage_in_bytes` less `total_inactive_file`), and `memory.max_usage_in_bytes` reset at the window's start (page cache included: an upper bound). The goal is checked against the higher of the kubelet's and the cgroup's working set.",
		benchSampleEvery, median.Round(time.Second), largest.Round(time.Second), benchCgroupEvery)
	p("")
	p("- Image: `dist/image_linux_%s.tar` %.1f MiB; as containerd reports it to the kubelet (Node `status.images`) %.1f MiB.", runtime.GOARCH, mebibytes(uint64(b.imageTar)), mebibytes(uint64(b.imageCRI)))
	p("- From `kubectl apply` of the DaemonSet to the agent pod Ready (the only agent pod: one kubelet node): %s by the pod's Ready condition (1 s resolution), %s until a poll saw it.",
		b.readyCondition.Round(100*time.Millisecond), b.readySeen.Round(100*time.Millisecond))
	p("- The manifest's resources: requests cpu %dm, memory %s; limits memory %s. Goal: the working set's peak at most %.0f %% of the limit (%.0f MiB).",
		b.cpuRequest, resource.NewQuantity(b.memRequest, resource.BinarySI), limit, 100*benchPeakGoal, benchPeakGoal*mebibytes(uint64(b.memLimit)))
	p("")
	s.WriteString("| window | kubelet samples | working set min / p50 / max (MiB) | max, % of limit | max, % of request | cgroup working set peak (MiB, % of limit) | cgroup usage peak (MiB) | CPU mean / max (millicores) | mean, % of request | load (1 min) start → end |\n")
	s.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range b.windows {
		ws := w.sortedWorkingSets()
		top := uint64(0)
		if len(ws) > 0 {
			top = ws[len(ws)-1]
		}
		cgroupWS, cgroupUsage := "n/a", "n/a"
		if w.cgroupWorkingSet > 0 {
			cgroupWS = fmt.Sprintf("%.1f (%.0f %%)", mebibytes(w.cgroupWorkingSet), percent(w.cgroupWorkingSet, b.memLimit))
		}
		if w.cgroupPeak > 0 {
			cgroupUsage = fmt.Sprintf("%.1f", mebibytes(w.cgroupPeak))
		}
		cpu, cpuShare := "n/a (restarted)", "n/a"
		if mean, highest, ok := w.cpu(); ok {
			cpu = fmt.Sprintf("%.1f / %.1f", mean, highest)
			cpuShare = fmt.Sprintf("%.0f %%", 100*mean/float64(b.cpuRequest))
		}
		p("| %s | %d | %s | %.0f %% | %.0f %% | %s | %s | %s | %s | %s → %s |", w.name, len(w.samples), w.workingSet(),
			percent(top, b.memLimit), percent(top, b.memRequest), cgroupWS, cgroupUsage, cpu, cpuShare, firstField(w.loadStart), firstField(w.loadEnd))
	}
	p("")
	verdict := "held"
	if float64(b.peak()) > benchPeakGoal*float64(b.memLimit) {
		verdict = "NOT held"
	}
	p("- Peak working set %.1f MiB, %.0f %% of the %s limit: the %.0f %% goal %s.", mebibytes(b.peak()), percent(b.peak(), b.memLimit), limit, 100*benchPeakGoal, verdict)
	p("- The leave of node-3 (`kubectl etcdmember leave`, asked %s into its window) took %s to Removed; the pod agent led throughout.", benchLeaveAt, b.leaveTook.Round(100*time.Millisecond))
	p("- Sweep window: %d Nodes created in %s through an admin client (%d at a time, %d QPS), then the pod agent's container was sent SIGTERM so a host agent took the Lease and the kubelet restarted it as a follower; %s later both host agents were stopped, and the pod agent held the Lease %s after. The apiserver served %.0f LIST requests for Nodes in the window, from every client (the sweep lists pages of %d Nodes: sweepPageSize). The sweep runs at every new term with or without `--leave-on-node-delete`, so the manifest was left unchanged.",
		b.nodes, b.created.Round(time.Second), benchCreateWorkers, benchCreateQPS, benchWarmup, b.takeover.Round(100*time.Millisecond), b.sweepLists, 2000)
	for _, w := range b.windows {
		if len(w.errors) > 0 || w.restarted || w.cgroupNote != "" {
			p("- %s: %d summary reads failed (%s); container restarted in the window: %v; %s", w.name, len(w.errors), strings.Join(w.errors, "; "), w.restarted, w.cgroupNote)
		}
	}
	return s.String()
}

func mebibytes(b uint64) float64 { return float64(b) / (1 << 20) }

func percent(v uint64, of int64) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(v) / float64(of)
}

// loadAvg is /proc/loadavg's three load averages.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

func firstField(load string) string { f, _, _ := strings.Cut(load, ","); return f }
