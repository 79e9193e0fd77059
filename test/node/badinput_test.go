package node

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

const (
	// readyzRegistered is the pod agent's readiness check of its registration, which names the
	// cause when it fails (the manifests bind the health port on the node's loopback).
	readyzRegistered = "http://127.0.0.1:9470/readyz/registered"
	// recovery bounds a crash-looping pod's return once its cause is fixed: the kubelet's back-off
	// doubles from 10s and the pod has restarted a few times by then.
	recovery = 3 * time.Minute
)

// readyz returns the pod agent's readiness answer for its registration: "" when it passes.
func readyz(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, readyzRegistered, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode == http.StatusOK {
		return "", nil
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, body), nil
}

// waitUnready waits until the pod agent's readiness fails with a reason that contains want.
func (tr *tier) waitUnready(want string) string {
	tr.t.Helper()
	var last string
	err := framework.Poll(settle, pollEvery, func(ctx context.Context) (bool, error) {
		why, err := readyz(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = why
		return strings.Contains(why, want), nil
	})
	if err != nil {
		tr.t.Fatalf("the agent's readiness never failed naming %q (last: %s)", want, last)
	}
	return last
}

// TestBadInputSaysWhyAndRecovers: each mistake an operator can make around the agent pod shows in
// the pod's Events, its log or its readiness, changes nothing in etcd, and passes once fixed, with
// no edit of the manifest: the client certificate missing, then its key unreadable, then the local
// etcd not answering at HOST_IP, then the apiserver not answering for a while.
func TestBadInputSaysWhyAndRecovers(t *testing.T) {
	tr := newTier(t)
	members := tr.etcdMembers()
	cert := filepath.Join(framework.EtcdPKI, "healthcheck-client.crt")
	key := filepath.Join(framework.EtcdPKI, "healthcheck-client.key")

	// Missing: the hostPath's type File refuses to mount it, and the kubelet says so.
	if err := os.Rename(cert, cert+".away"); err != nil {
		t.Fatal(err)
	}
	tr.applyDaemonSet(tr.node.AgentImage)
	pod := tr.agentPod("created", func(*corev1.Pod) bool { return true })
	ev := framework.PodEvent(tr.t, tr.cs, settle, pollEvery, pod.Name, cert)
	t.Logf("missing certificate: %s %s", ev.Reason, ev.Message)
	if err := os.Rename(cert+".away", cert); err != nil {
		t.Fatal(err)
	}
	tr.agentPod("Ready once the certificate is back", framework.PodReady)

	// Unreadable: root without capabilities cannot read a 0000 file; the agent refuses to start and
	// says which file, and starts once it can read it. It exits each time by design: the restarts
	// are counted once it runs.
	const unreadable = "the agent exits on its unreadable etcd client key until the test makes it readable"
	tr.deleteDaemonSet()
	if err := os.Chmod(key, 0); err != nil {
		t.Fatal(err)
	}
	tr.agents.ExpectRestarts(-1, unreadable)
	tr.applyDaemonSet(tr.node.AgentImage)
	pod = tr.agentPod("crash-looping on the unreadable key", func(p *corev1.Pod) bool { return framework.PodRestarts(p) >= 1 })
	if log := tr.agents.Logs(); !strings.Contains(log, key) || !strings.Contains(log, "permission denied") {
		t.Errorf("the agent's log does not name %s as unreadable:\n%s", key, log)
	}
	if framework.PodReady(pod) {
		t.Errorf("the agent pod is Ready with an unreadable key")
	}
	if err := os.Chmod(key, 0o600); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, recovery, pollEvery, "the agent pod Ready once the key is readable", func(ctx context.Context) (bool, error) {
		pods, err := tr.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: framework.AgentSelector})
		if err != nil || len(pods.Items) != 1 || !framework.PodReady(&pods.Items[0]) {
			return false, err
		}
		pod = &pods.Items[0]
		return true, nil
	})
	// From here on, frozen etcd or apiserver included, the agent keeps running.
	tr.agents.ExpectRestarts(framework.PodRestarts(pod), unreadable)

	// The local etcd frozen: the agent keeps running (liveness is its own), its readiness names
	// etcd, and it is ready again once etcd answers.
	node1 := tr.nc.Cluster.Member("node-1")
	node1.Pause(t)
	t.Logf("etcd frozen: %s", tr.waitUnready(node1.IP()))
	node1.Resume(t)
	tr.waitReadyz()

	// The apiserver frozen for a while: the readiness names the API call that failed (through the
	// "kubernetes" Service), and passes
	// again once the apiserver answers.
	tr.api.Pause(t)
	why := tr.waitUnready("https://10.96.0.1:443")
	t.Logf("apiserver frozen: %s", why)
	tr.api.Resume(t)
	tr.waitReadyz()
	tr.agentPod("Ready after the outages", framework.PodReady)

	tr.assertMembers(members...)
}

// waitReadyz waits until the pod agent's readiness passes.
func (tr *tier) waitReadyz() {
	tr.t.Helper()
	framework.Eventually(tr.t, settle, pollEvery, "the agent's readiness passing", func(ctx context.Context) (bool, error) {
		why, err := readyz(ctx)
		return err == nil && why == "", nil
	})
}
