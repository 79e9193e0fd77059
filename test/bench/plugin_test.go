//go:build bench

package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// pluginRuns is how often each plugin command is timed; runs of the two commands compared
// alternate, so that both see the same machine load.
const pluginRuns = 15

// frozenListTimeout is the --timeout of `list` with one member frozen.
const frozenListTimeout = 2 * time.Second

// benchPluginList times `kubectl etcdmember list` against `kubectl get` on the same objects, both
// through the real kubectl with process start included, on the scale section's cluster.
func (e *env) benchPluginList(r *results) {
	e.t.Helper()
	for i := range pluginRuns {
		plugin := e.api.Plugin(e.t, nil, nil, "list")
		get := e.api.KubectlWithPlugin(e.t, nil, nil, "get", "etcdmembers.etcdmember.io")
		if plugin.Code != 0 || get.Code != 0 {
			e.t.Fatalf("run %d: list: %s\nget: %s", i+1, plugin.Output(), get.Output())
		}
		if rows, want := strings.Count(plugin.Stdout, "\n")-1, r.scaleObjects; rows != want {
			e.t.Fatalf("list printed %d rows, want %d", rows, want)
		}
		e.t.Logf("run %d/%d: kubectl etcdmember list %s, kubectl get %s", i+1, pluginRuns, plugin.Took, get.Took)
		r.pluginList = append(r.pluginList, plugin.Took)
		r.kubectlGet = append(r.kubectlGet, get.Took)
	}
}

// benchPluginFrozen times `list` with etcd access while one of three members is frozen with
// SIGSTOP. The apiserver stores on an etcd of its own, so that only etcd's view waits on the
// frozen member.
func benchPluginFrozen(t *testing.T, r *results) {
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3})
	api := framework.StartAPIServer(t, framework.NewCluster(t, framework.ClusterConfig{Size: 1}))
	api.InstallEtcdmember(t)
	_, kubeconfig := api.User(t, "etcdmember-agent", "etcdmember:agents")
	for _, m := range c.Members() {
		framework.StartAgent(t, m, api, "--kubeconfig="+kubeconfig)
	}
	frozen := c.Member("node-2")
	frozen.Pause(t)
	defer frozen.Resume(t)
	r.frozenListTimeout = frozenListTimeout
	endpoints := strings.Join(c.Endpoints(), ",")
	for i := range pluginRuns {
		run := api.Plugin(t, nil, nil, "list", "--etcd-endpoints", endpoints, "--timeout", frozenListTimeout.String())
		if run.Code != 0 || !strings.Contains(run.Stdout, "node-2") {
			t.Fatalf("run %d: %s", i+1, run.Output())
		}
		t.Logf("list with %s frozen, run %d/%d: %s", frozen.Name, i+1, pluginRuns, run.Took)
		r.frozenList = append(r.frozenList, run.Took)
	}
}
