package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The node tier: what operators run, under a real kubelet. A NodeCluster is etcd members on the
// tier's interface (kubespray's layout: etcd is a host service at each node's address), a
// kube-apiserver with Node authorization whose "kubernetes" Service kube-proxy routes, and
// kube-controller-manager and kube-scheduler; a KubeletNode is one member's node: containerd,
// runc and a kubelet that registers its Node through the API. Every process lives in the tier's
// namespaces (RunInNodeNamespace); make nodebin builds or installs each part.

const (
	// NodeServiceCIDR is the tier's Service range; the "kubernetes" Service is its first address.
	NodeServiceCIDR = "10.96.0.0/24"
	// nodeReadyTimeout bounds a kubelet's start: registration, the runtime's network ready.
	nodeReadyTimeout = 90 * time.Second
	// controlPlaneLabel is the label kubeadm puts on control-plane Nodes, which the DaemonSet
	// selects; the kubelet may not set it itself.
	controlPlaneLabel = "node-role.kubernetes.io/control-plane"
	// EtcdPKI is where kubeadm keeps etcd's certificates, which the shipped manifests mount (in the
	// tier's overlay of /etc).
	EtcdPKI = "/etc/kubernetes/pki/etcd"
)

// NodeCluster is the tier's control plane.
type NodeCluster struct {
	Cluster *Cluster
	API     *APIServer
	dir     string
	// apart are the namespaces of the members whose nodes have their own, by member name.
	apart map[string]*NodeNamespaces
}

// StartNodeCluster starts members etcd members (TLS; node-1 also serves 127.0.0.1:2379, as
// kubeadm's etcd does), the apiserver, kube-controller-manager and kube-scheduler, each at an
// address of the tier's own, and installs etcd's client certificate where kubeadm puts it. The
// members named in apart get node namespaces of their own (NewNodeNamespaces), where their etcd
// runs, and their kubelet nodes if any; the others live in the tier's namespace.
func StartNodeCluster(t TB, members int, apart ...string) *NodeCluster {
	t.Helper()
	nc := &NodeCluster{apart: map[string]*NodeNamespaces{}}
	ips := make([]string, members)
	for i := range ips {
		name := fmt.Sprintf("node-%d", i+1)
		if slices.Contains(apart, name) {
			nc.apart[name] = NewNodeNamespaces(t)
			ips[i] = nc.apart[name].IP
			continue
		}
		ips[i] = NodeAddress(t)
	}
	apiIP := NodeAddress(t)
	c := NewCluster(t, ClusterConfig{Size: members, TLS: true, IPs: ips, LoopbackClient: "node-1",
		Wrap: func(member string) []string {
			if ns := nc.apart[member]; ns != nil {
				return ns.Command()
			}
			return nil
		}})
	api := StartAPIServerWith(t, c, APIServerConfig{IP: apiIP, ServiceCIDR: NodeServiceCIDR, Nodes: true})
	nc.Cluster, nc.API, nc.dir = c, api, t.TempDir()
	nc.installEtcdPKI(t)

	_, kcm := api.User(t, "system:kube-controller-manager")
	// Its flex-volume prober creates its directory when missing, by default under the host's /usr,
	// which the tier does not overlay: it goes under the test's directory instead.
	nc.start(t, "kube-controller-manager",
		"--kubeconfig="+kcm, "--authentication-kubeconfig="+kcm, "--authorization-kubeconfig="+kcm,
		"--root-ca-file="+api.CAFile(), "--service-account-private-key-file="+api.saKey,
		"--use-service-account-credentials", "--leader-elect=false", "--bind-address=127.0.0.1",
		"--flex-volume-plugin-dir="+filepath.Join(nc.dir, "flexvolume"))
	_, scheduler := api.User(t, "system:kube-scheduler")
	nc.start(t, "kube-scheduler", "--kubeconfig="+scheduler, "--authentication-kubeconfig="+scheduler,
		"--authorization-kubeconfig="+scheduler, "--leader-elect=false", "--bind-address=127.0.0.1")
	return nc
}

func (nc *NodeCluster) start(t TB, name string, args ...string) {
	t.Helper()
	p := newProcess(t, name, filepath.Join(nc.dir, name+".log"))
	if err := p.start(Binary(t, name), args...); err != nil {
		t.Fatalf("%v", err)
	}
}

// installEtcdPKI writes the cluster's CA and an etcd client certificate under EtcdPKI, with the
// names kubeadm gives them: the shipped manifests mount exactly these files. /etc is the tier's
// overlay, so nothing reaches the host's /etc.
func (nc *NodeCluster) installEtcdPKI(t TB) {
	t.Helper()
	files := nc.Cluster.TLS()
	if err := os.MkdirAll(EtcdPKI, 0o755); err != nil {
		t.Fatalf("etcd PKI: %v", err)
	}
	for src, dst := range map[string]string{
		files.CA: "ca.crt", files.ClientCert: "healthcheck-client.crt", files.ClientKey: "healthcheck-client.key",
	} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatalf("etcd PKI: %v", err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(dst, ".key") {
			mode = 0o600 // as kubeadm writes its keys: only root reads them
		}
		if err := os.WriteFile(filepath.Join(EtcdPKI, dst), data, mode); err != nil {
			t.Fatalf("etcd PKI: %v", err)
		}
	}
}

// KubeletNode is one etcd member's node: containerd, runc and a kubelet, named after the member
// and at its address.
type KubeletNode struct {
	Name string
	IP   string
	// AgentImage is the image of make image, as imported into the node's containerd.
	AgentImage string

	nc         *NodeCluster
	ns         *NodeNamespaces // nil: the node lives in the tier's namespaces
	dir        string
	run        string // the node's directory under /run: sockets and runtime state
	cgroup     string // cgroupRoot, in every hierarchy
	containerd *Containerd
	kubelet    *process
	// kubeletArgs are the kubelet's binary and flags, for RestartKubelet.
	kubeletArgs []string
	proxy       *process
}

// StartKubeletNode starts the node of member m: containerd with the pause image and the agent
// image (make image) imported, kube-proxy, and a kubelet that registers Node m.Name at m's
// address. It labels and taints the Node as kubeadm does a control-plane Node and returns once
// the Node is Ready. Everything is stopped, unmounted and removed at t's cleanup.
func (nc *NodeCluster) StartKubeletNode(t TB, m *Member) *KubeletNode {
	t.Helper()
	n := &KubeletNode{Name: m.Name, IP: m.IP(), nc: nc, ns: nc.apart[m.Name], dir: t.TempDir(),
		run: filepath.Join("/run/etcdmember-node", m.Name)}
	for _, d := range []string{filepath.Join(n.dir, "manifests"), filepath.Join(n.dir, "cni")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("node %s: %v", n.Name, err)
		}
	}
	// /run is the node's own where it has namespaces of its own.
	runStep(t, n.command("mkdir", "-p", n.run))
	n.cgroup = NodeCgroup(t, n.Name)
	// Registered before the processes, so it runs after they are killed.
	t.Cleanup(func() {
		if err := n.tearDown(); err != nil {
			t.Logf("node %s cleanup: %v", n.Name, err)
		}
	})
	n.startContainerd(t)
	n.importImages(t)
	n.startProxy(t)
	n.startKubelet(t)
	n.waitReady(t)
	return n
}

// command is argv run in the node's namespaces.
func (n *KubeletNode) command(argv ...string) []string {
	if n.ns == nil {
		return argv
	}
	return append(n.ns.Command(), argv...)
}

// start starts p with bin and args in the node's namespaces.
func (n *KubeletNode) start(t TB, p *process, bin string, args ...string) {
	t.Helper()
	argv := n.command(append([]string{bin}, args...)...)
	if err := p.start(argv[0], argv[1:]...); err != nil {
		t.Fatalf("%v", err)
	}
}

// ManifestDir is the kubelet's staticPodPath.
func (n *KubeletNode) ManifestDir() string { return filepath.Join(n.dir, "manifests") }

// PodLogDir is where the kubelet writes its containers' logs (podLogsDir).
func (n *KubeletNode) PodLogDir() string { return filepath.Join(n.dir, "pod-logs") }

// KubeletLog is the kubelet's own log.
func (n *KubeletNode) KubeletLog() string { return n.kubelet.logPath }

func (n *KubeletNode) socket() string { return filepath.Join(n.run, "containerd.sock") }

// startProxy runs kube-proxy for this node, in nftables mode: it routes the "kubernetes"
// Service's ClusterIP to the apiserver. Its rules live in the tier's network namespace.
func (n *KubeletNode) startProxy(t TB) {
	t.Helper()
	_, kubeconfig := n.nc.API.User(t, "system:kube-proxy")
	path := filepath.Join(n.dir, "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(KubeProxyConfig(kubeconfig, n.Name, n.IP)), 0o644); err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	n.proxy = newProcess(t, "kube-proxy "+n.Name, filepath.Join(n.dir, "kube-proxy.log"))
	n.start(t, n.proxy, Binary(t, "kube-proxy"), "--config="+path)
}

// KubeProxyConfig is the configuration of a node's kube-proxy, in nftables mode, reaching the
// API with kubeconfig (the built-in system:node-proxier binding's user, system:kube-proxy): it
// routes the "kubernetes" Service's ClusterIP, which the agents' in-cluster configuration uses,
// to the apiservers. Its rules live in the node's network namespace.
func KubeProxyConfig(kubeconfig, node, ip string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {kubeconfig: %q}
hostnameOverride: %q
bindAddress: %q
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
# Conntrack settings are the machine's, not the namespace's: leave them alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, kubeconfig, node, ip)
}

func (n *KubeletNode) startKubelet(t TB) {
	t.Helper()
	_, kubeconfig := n.nc.API.User(t, "system:node:"+n.Name, "system:nodes")
	config := fmt.Sprintf(kubeletConfig, "/"+n.cgroup, n.socket(), n.ManifestDir(), n.PodLogDir(),
		filepath.Join(n.dir, "volume-plugins"), n.IP, n.nc.API.CAFile())
	path := filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	n.kubelet = newProcess(t, "kubelet "+n.Name, filepath.Join(n.dir, "kubelet.log"))
	n.kubeletArgs = n.command(Binary(t, "kubelet"), "--config="+path, "--kubeconfig="+kubeconfig,
		"--root-dir="+filepath.Join(n.dir, "kubelet"), "--cert-dir="+filepath.Join(n.dir, "pki"),
		"--hostname-override="+n.Name, "--node-ip="+n.IP,
		"--register-with-taints="+controlPlaneLabel+"=:NoSchedule")
	if err := n.kubelet.start(n.kubeletArgs[0], n.kubeletArgs[1:]...); err != nil {
		t.Fatalf("%v", err)
	}
}

// kubeletConfig: cgroup v1 allowed (these machines have it), swap allowed, no iptables chains of
// the kubelet's own (one of them drops non-local traffic to 127.0.0.0/8), image garbage
// collection off (the imported images cannot be pulled again), the static pod directory read
// every second, and the apiserver's clients authenticated and authorized as kubeadm sets it up.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: %q
containerRuntimeEndpoint: unix://%s
staticPodPath: %q
fileCheckFrequency: 1s
podLogsDir: %q
volumePluginDir: %q
address: %q
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
makeIPTablesUtilChains: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%%, imagefs.available: 1%%, nodefs.inodesFree: 1%%}
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
`

// waitReady waits for the Node to be registered and Ready, then labels it control-plane.
func (n *KubeletNode) waitReady(t TB) {
	t.Helper()
	cs := n.nc.API.Clientset()
	n.kubelet.waitReady(t, nodeReadyTimeout, "Node "+n.Name+" not Ready", func(ctx context.Context) error {
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("Node %s is not Ready: %v", n.Name, node.Status.Conditions)
	})
	n.Label(t)
}

// RestartKubelet stops the kubelet and starts it again with the same settings, as a node's service
// manager would: a kubelet registers its Node only when it starts. It returns once the Node is
// registered (not necessarily Ready).
func (n *KubeletNode) RestartKubelet(t TB) {
	t.Helper()
	if err := n.kubelet.stop(); err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	if err := n.kubelet.start(n.kubeletArgs[0], n.kubeletArgs[1:]...); err != nil {
		t.Fatalf("%v", err)
	}
	n.kubelet.waitReady(t, nodeReadyTimeout, "Node "+n.Name+" not registered", func(ctx context.Context) error {
		_, err := n.nc.API.Clientset().CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		return err
	})
}

// Label puts kubeadm's control-plane label on the Node (again, after it was re-registered).
func (n *KubeletNode) Label(t TB) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:""}}}`, controlPlaneLabel)
	Eventually(t, 30*time.Second, 200*time.Millisecond, "labelling Node "+n.Name, Succeeds(func(ctx context.Context) error {
		_, err := n.nc.API.Clientset().CoreV1().Nodes().Patch(ctx, n.Name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
		return err
	}))
}

// tearDown stops the node for good: the kubelet first (so it restarts nothing), then every process
// in the node's cgroups (the containers) and its shims, then containerd; it unmounts what they
// left mounted under the node's directories, deepest first, and removes the node's cgroups.
func (n *KubeletNode) tearDown() error {
	var errs []error
	for _, p := range []*process{n.kubelet, n.proxy} {
		if p != nil {
			errs = append(errs, p.kill())
		}
	}
	if n.containerd != nil {
		n.containerd.KillContainers(n.cgroup)
		errs = append(errs, n.containerd.Kill())
	}
	if n.ns == nil {
		// A node with namespaces of its own mounted in them only: they go with its processes.
		errs = append(errs, unmountUnder(n.dir), unmountUnder(n.run))
	}
	errs = append(errs, RemoveNodeCgroup(n.cgroup))
	return errors.Join(errs...)
}
