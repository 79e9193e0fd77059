package framework

import (
	"cmp"
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// CreateWorkerNodes creates n WorkerNodes, named worker-00000 on, as kubelets register theirs:
// workers at a time through an admin client at qps, failing t with the first error.
func (a *APIServer) CreateWorkerNodes(t TB, n, workers int, qps float32) {
	t.Helper()
	cfg := a.RESTConfig()
	cfg.QPS, cfg.Burst = qps, int(qps)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	next := make(chan int)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range workers {
		wg.Go(func() {
			for i := range next {
				node := WorkerNode(WorkerNodeName(i), i)
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				_, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
				cancel()
				if err != nil {
					mu.Lock()
					first = cmp.Or(first, fmt.Errorf("create Node %s: %w", node.Name, err))
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatalf("%v", first)
	}
}

// WorkerNodeName names the i-th worker Node.
func WorkerNodeName(i int) string { return fmt.Sprintf("worker-%05d", i) }

// WorkerNode is the i-th of many worker Nodes a benchmark creates as kubelets register theirs: the
// labels a kubelet and a cloud provider set, kubelet's annotations and a Ready status, so that each
// carries the metadata of a real one. It is no control-plane Node: no agent runs for it.
func WorkerNode(name string, i int) *corev1.Node {
	zone := fmt.Sprintf("zone-%c", 'a'+i%3)
	ip := fmt.Sprintf("10.%d.%d.%d", 64+i/65536, i/256%256, i%256)
	qty := resource.MustParse
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: qty("8"), corev1.ResourceMemory: qty("32Gi"), corev1.ResourcePods: qty("110"),
		corev1.ResourceEphemeralStorage: qty("100Gi"), "hugepages-1Gi": qty("0"), "hugepages-2Mi": qty("0"),
	}
	now := metav1.Now()
	condition := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
				"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
				corev1.LabelInstanceTypeStable: "m6i.2xlarge", corev1.LabelTopologyZone: zone, corev1.LabelTopologyRegion: "region-1",
				"node-role.kubernetes.io/worker": "",
			},
			Annotations: map[string]string{
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
				"kubeadm.alpha.kubernetes.io/cri-socket":                 "unix:///var/run/containerd/containerd.sock",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.%d.0/24", 128+i/256, i%256), ProviderID: "bench://" + name},
		Status: corev1.NodeStatus{
			Capacity: capacity, Allocatable: capacity,
			Conditions: []corev1.NodeCondition{
				condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				condition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
			},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion: "v1.37.2", OSImage: "Ubuntu 24.04 LTS", KernelVersion: "6.8.0-1017-aws",
				ContainerRuntimeVersion: "containerd://2.1.4", OperatingSystem: "linux", Architecture: "amd64",
			},
		},
	}
}
