package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestDeployManifests keeps deploy/ from rotting: every Kubernetes manifest is accepted by a real
// apiserver (server-side dry run, after config/default), and the agent flags in every manifest,
// the systemd unit included, are flags the agent knows.
func TestDeployManifests(t *testing.T) {
	root, ok := framework.RepoRoot()
	if !ok {
		t.Fatal("repository root not found")
	}
	deploy := filepath.Join(root, "deploy")
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 1})
	api := framework.StartAPIServer(t, c)
	api.InstallEtcdmember(t)
	// The controller-manager, which this test bed does not run, creates every namespace's
	// default ServiceAccount; pods need it to pass admission.
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "kube-system"}}
	if _, err := api.Clientset().CoreV1().ServiceAccounts("kube-system").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("default service account: %v", err)
	}

	var pod corev1.Pod
	staticPod := filepath.Join(deploy, "static-pod", "etcdmember-agent.yaml")
	readYAML(t, staticPod, &pod)
	var ds appsv1.DaemonSet
	daemonSet := filepath.Join(deploy, "daemonset", "etcdmember-agent.yaml")
	readYAML(t, daemonSet, &ds)
	for _, file := range []string{staticPod, daemonSet} {
		api.MustKubectl(t, "apply", "--dry-run=server", "-f", file)
	}

	// The image's entrypoint is `kubectl-etcdmember serve`: the pods' args are its flags.
	argSets := map[string][]string{
		"static pod": append([]string{"serve"}, pod.Spec.Containers[0].Args...),
		"daemonset":  append([]string{"serve"}, ds.Spec.Template.Spec.Containers[0].Args...),
		"systemd":    execStartArgs(t, filepath.Join(deploy, "systemd", "etcdmember-agent.service")),
	}
	for name, args := range argSets {
		if len(args) == 0 || args[0] != "serve" {
			t.Errorf("%s: agent args %v do not start with the serve command", name, args)
			continue
		}
		withHelp := append(append([]string{}, args...), "--help")
		for i, a := range withHelp {
			withHelp[i] = strings.ReplaceAll(a, "$(HOST_IP)", "127.0.0.1")
		}
		if out, code := runAgentCLI(t, withHelp...); code != 0 {
			t.Errorf("%s: the agent rejects its flags (exit %d): %s", name, code, out)
		}
	}
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// execStartArgs returns the arguments after the binary in a unit's ExecStart line.
func execStartArgs(t *testing.T, unit string) []string {
	t.Helper()
	data, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.ReplaceAll(string(data), "\\\n", " ")
	for _, line := range strings.Split(joined, "\n") {
		if rest, ok := strings.CutPrefix(line, "ExecStart="); ok {
			fields := strings.Fields(rest)
			return fields[1:]
		}
	}
	t.Fatalf("%s has no ExecStart", unit)
	return nil
}
