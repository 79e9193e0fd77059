package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestDeployManifests keeps deploy/ from rotting: every Kubernetes manifest is accepted by a real
// apiserver (server-side dry run, after config/default), and the agent flags in every manifest,
// the systemd unit included, are flags the agent knows.
func TestDeployManifests(t *testing.T) {
	t.Parallel()
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

	// Both pods bind their member to the Node they run on (--node-name's default).
	for name, envs := range map[string][]corev1.EnvVar{"static pod": pod.Spec.Containers[0].Env, "daemonset": ds.Spec.Template.Spec.Containers[0].Env} {
		i := slices.IndexFunc(envs, func(v corev1.EnvVar) bool { return v.Name == "NODE_NAME" })
		if i < 0 || envs[i].ValueFrom == nil || envs[i].ValueFrom.FieldRef == nil || envs[i].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
			t.Errorf("%s: no NODE_NAME from the downward API's spec.nodeName in %+v", name, envs)
		}
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

// TestShippedRBACIsLeastPrivilege renders config/default as `kubectl apply -k` would and fails on
// any wildcard, any access to Secrets, and any Lease get or update not limited to the agents' own
// Lease: kube-system also holds kube-controller-manager's and kube-scheduler's.
func TestShippedRBACIsLeastPrivilege(t *testing.T) {
	t.Parallel()
	root, ok := framework.RepoRoot()
	if !ok {
		t.Fatal("repository root not found")
	}
	rendered, err := exec.Command(framework.Binary(t, "kubectl"), "kustomize", filepath.Join(root, "config", "default")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/default: %v", err)
	}
	roles := 0
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		var role struct {
			Kind     string              `json:"kind"`
			Metadata metav1.ObjectMeta   `json:"metadata"`
			Rules    []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
			t.Fatalf("parsing rendered config: %v", err)
		}
		if role.Kind != "Role" && role.Kind != "ClusterRole" {
			continue
		}
		roles++
		for _, rule := range role.Rules {
			where := fmt.Sprintf("%s %s: rule %+v", role.Kind, role.Metadata.Name, rule)
			for _, list := range [][]string{rule.APIGroups, rule.Resources, rule.Verbs, rule.ResourceNames, rule.NonResourceURLs} {
				if slices.Contains(list, "*") {
					t.Errorf("%s has a wildcard", where)
				}
			}
			if slices.Contains(rule.Resources, "secrets") {
				t.Errorf("%s grants access to Secrets", where)
			}
			if slices.Contains(rule.Resources, "leases") && slices.ContainsFunc(rule.Verbs, func(v string) bool { return v != "create" }) &&
				!slices.Equal(rule.ResourceNames, []string{v1alpha1.LeaseName}) {
				t.Errorf("%s lets the agents read or update Leases other than %s", where, v1alpha1.LeaseName)
			}
			// The node controller reads Nodes' metadata and patches their finalizers: no create,
			// update or delete of a Node, no subresource (status, proxy) of one.
			if slices.Contains(rule.Resources, "nodes") && slices.ContainsFunc(rule.Verbs, func(v string) bool { return !slices.Contains([]string{"get", "list", "watch", "patch"}, v) }) {
				t.Errorf("%s grants more on Nodes than get, list, watch and patch", where)
			}
			if slices.ContainsFunc(rule.Resources, func(r string) bool { return strings.HasPrefix(r, "nodes/") }) {
				t.Errorf("%s grants a subresource of Nodes", where)
			}
		}
	}
	if roles < 2 {
		t.Fatalf("config/default renders %d roles, want the agents' ClusterRole and Role:\n%s", roles, rendered)
	}
}
