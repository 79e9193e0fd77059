package kubeadm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// nodeReadyTimeout bounds a joined node's becoming Ready: its kubelet's TLS bootstrap, and its
// runtime's network ready.
const nodeReadyTimeout = 2 * time.Minute

// Cluster is a control plane that kubeadm built: its first node initialized, the others joined.
type Cluster struct {
	Settings
	// First is the node kubeadm init ran on; controlPlaneEndpoint is its address.
	First *Node

	dir string
	// proxyKubeconfig is the kube-proxies' credential, made by kubeadm on the first node.
	proxyKubeconfig string
}

// Init runs `kubeadm init --upload-certs` on first, with stacked etcd, starts its kube-proxy and
// returns once its Node is Ready.
func Init(t framework.TB, first *Node) *Cluster {
	t.Helper()
	version := strings.TrimSpace(first.MustKubeadm(t, "version", "-o", "short"))
	c := &Cluster{First: first, dir: t.TempDir(), Settings: Settings{
		KubernetesVersion: version,
		EtcdImageTag:      first.EtcdImageTags[0],
		Endpoint:          first.IP + ":6443",
		ServiceSubnet:     framework.NodeServiceCIDR,
		Token:             randomHex(t, 3) + "." + randomHex(t, 8),
		CertificateKey:    randomHex(t, 32),
	}}
	config, err := InitConfig(c.Settings, first)
	if err != nil {
		t.Fatalf("%v", err)
	}
	path := c.write(t, "init-"+first.Name+".yaml", config)
	first.MustKubeadm(t, "init", "--config", path, "--upload-certs", "--v=1")
	// The user of the built-in system:node-proxier binding, signed by kubeadm with the cluster CA,
	// as an operator makes a credential kubeadm did not: the kube-proxy addon, which would have
	// made one, is skipped.
	_, kubeconfig, err := first.kubeadm(t, "kubeconfig", "user", "--config", path, "--client-name", "system:kube-proxy")
	if err != nil {
		t.Fatalf("%v", err)
	}
	c.proxyKubeconfig = c.write(t, "kube-proxy.conf", kubeconfig)
	first.StartProxy(t, c.proxyKubeconfig)
	c.waitReady(t, first)
	return c
}

// Join runs `kubeadm join --control-plane` on n, discovering the cluster through its bootstrap
// token and the CA's pin, as `kubeadm token create --print-join-command` prints them, starts n's
// kube-proxy and returns once n's Node is Ready.
func (c *Cluster) Join(t framework.TB, n *Node) {
	t.Helper()
	ca, err := os.ReadFile(c.First.HostPath(t, "/etc/kubernetes/pki/ca.crt"))
	if err != nil {
		t.Fatalf("%v", err)
	}
	hash, err := CACertHash(ca)
	if err != nil {
		t.Fatalf("%v", err)
	}
	config, err := JoinConfig(c.Settings, n, hash)
	if err != nil {
		t.Fatalf("%v", err)
	}
	n.MustKubeadm(t, "join", "--config", c.write(t, "join-"+n.Name+".yaml", config), "--v=1")
	n.StartProxy(t, c.proxyKubeconfig)
	c.waitReady(t, n)
}

// Admin is kubeadm's admin.conf, as written on the first node: cluster-admin at
// controlPlaneEndpoint.
func (c *Cluster) Admin(t framework.TB) framework.Admin {
	t.Helper()
	return framework.Admin(c.First.HostPath(t, "/etc/kubernetes/admin.conf"))
}

// waitReady waits until n's Node is registered and Ready.
func (c *Cluster) waitReady(t framework.TB, n *Node) {
	t.Helper()
	cs := c.Admin(t).Clientset(t)
	framework.Eventually(t, nodeReadyTimeout, 500*time.Millisecond, "Node "+n.Name+" Ready", func(ctx context.Context) (bool, error) {
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, fmt.Errorf("not Ready: %v", node.Status.Conditions)
	})
}

func (c *Cluster) write(t framework.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(c.dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatalf("%v", err)
	}
	return path
}

func randomHex(t framework.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("%v", fmt.Errorf("random bytes: %w", err))
	}
	return hex.EncodeToString(b)
}

// Etcdctl runs bin/etcdctl against the first node's etcd member with the client certificate
// kubeadm made for health checks, the one docs/runbooks.md gives the agent.
func (c *Cluster) Etcdctl(t framework.TB, args ...string) (string, error) {
	t.Helper()
	return c.EtcdctlAt(t, c.First, 30*time.Second, args...)
}

// EtcdctlAt is Etcdctl against n's member alone, each dial and call bounded by timeout (etcdctl
// appends a second --endpoints to the first, so the endpoint cannot be an argument).
func (c *Cluster) EtcdctlAt(t framework.TB, n *Node, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	pki := c.First.HostPath(t, "/etc/kubernetes/pki/etcd")
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Second)
	defer cancel()
	argv := append([]string{"--endpoints=https://" + n.IP + ":2379", "--cacert=" + filepath.Join(pki, "ca.crt"),
		"--cert=" + filepath.Join(pki, "healthcheck-client.crt"), "--key=" + filepath.Join(pki, "healthcheck-client.key"),
		"--dial-timeout=" + timeout.String(), "--command-timeout=" + timeout.String()}, args...)
	out, err := exec.CommandContext(ctx, framework.Binary(t, "etcdctl"), argv...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("etcdctl %s at %s: %w", strings.Join(args, " "), n.Name, err)
	}
	return string(out), nil
}

// SetEtcdImageTag names tag as the etcd image of every node from now on, in the
// ClusterConfiguration kubeadm keeps in the kube-system/kubeadm-config ConfigMap, as `kubeadm
// upgrade apply` stores the configuration it upgraded to: `kubeadm upgrade node` and every later
// join deploy what it says.
func (c *Cluster) SetEtcdImageTag(t framework.TB, tag string) {
	t.Helper()
	cs := c.Admin(t).Clientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cm, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeadm-config", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%v", fmt.Errorf("reading kubeadm's ClusterConfiguration: %w", err))
	}
	config, old := cm.Data["ClusterConfiguration"], "imageTag: "+c.EtcdImageTag+"\n"
	if strings.Count(config, old) != 1 {
		t.Fatalf("kubeadm's ClusterConfiguration has not exactly one %q:\n%s", old, config)
	}
	cm.Data["ClusterConfiguration"] = strings.Replace(config, old, "imageTag: "+tag+"\n", 1)
	if _, err := cs.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("%v", fmt.Errorf("storing kubeadm's ClusterConfiguration with etcd %s: %w", tag, err))
	}
	c.EtcdImageTag = tag
}
