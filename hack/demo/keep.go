package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// keepRunning starts the demo's lab (3 members, the apiserver, a Node and an agent per member,
// deleting a Node removes its member) and keeps it until ctx ends, the way `kind create cluster`
// leaves a cluster to try things on. The lines it prints are what a test (lab_test.go) and a
// newcomer's shell read: export lines first, commands to try after.
func keepRunning(ctx context.Context, l *lab) {
	step("Starting the lab: 3 etcd members, kube-apiserver, a Node and an agent per member")
	cluster := framework.NewCluster(l, framework.ClusterConfig{Size: 3})
	api := framework.StartAPIServer(l, cluster)
	api.MustKubectl(l, "apply", "-k", "config/default")
	for _, m := range cluster.Members() {
		startNodeAgent(l, api, m)
	}
	waitHealthy(l, api, cluster)
	bin, err := filepath.Abs(framework.BinDir())
	if err != nil {
		l.Fatalf("bin/: %v", err)
	}
	fmt.Printf(`
The lab is running. In another shell:

export PATH=%s:$PATH
export KUBECONFIG=%s
export ETCDCTL_ENDPOINTS=%s

Then try:
    kubectl etcdmember list -o wide        # the objects next to etcd's own member list
    kubectl etcdmember leave node-2        # removes node-2's member, waits until etcd no longer has it
    etcdctl member list -w table
    kubectl delete node node-3             # the agents run with --leave-on-node-delete
    kubectl get events.events.k8s.io -n kube-system

Ctrl-C here stops every process of the lab and removes its files.
`, bin, api.Kubeconfig(), strings.Join(cluster.Endpoints(), ","))
	<-ctx.Done()
	step("Stopping the lab")
}
