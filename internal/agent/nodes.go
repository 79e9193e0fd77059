package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/internal/controller"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// What the distributions that manage etcd membership themselves leave in the API for all to see.
const (
	// k3sEtcdFinalizer is the finalizer k3s and RKE2 keep on every Node of a cluster whose etcd
	// they run: their own controller removes a deleted Node's member.
	k3sEtcdFinalizer = "wrangler.cattle.io/managed-etcd-controller"
	// k0sEtcdGroup serves k0s's own EtcdMember kind (etcdmembers.etcd.k0sproject.io), through which
	// k0s removes members.
	k0sEtcdGroup = "etcd.k0sproject.io"
)

// managedElsewhere is refuseManagedMembership's refusal: the API answered, and what it shows rules
// --leave-on-node-delete out.
type managedElsewhere string

func (e managedElsewhere) Error() string { return string(e) }

// managedCheckRetry paces the check while the API does not answer.
var managedCheckRetry = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Cap: 10 * time.Second, Steps: math.MaxInt32}

// checkManagedMembership runs refuseManagedMembership until the API answers it. An agent started
// while the apiserver cannot answer (restarting, or its etcd endpoint frozen: make chaos, seed
// 941300915, scenario 36) waits for it and says so, as registration does, rather than exit with
// an error that only means "not yet". A refusal ends the agent.
func checkManagedMembership(ctx context.Context, cfg *rest.Config, retry wait.Backoff) error {
	return wait.ExponentialBackoffWithContext(ctx, retry, func(ctx context.Context) (bool, error) {
		err := refuseManagedMembership(ctx, cfg)
		var refusal managedElsewhere
		if errors.As(err, &refusal) {
			return false, err
		}
		if err != nil {
			logf.FromContext(ctx).Error(err, "Checking whether the distribution manages etcd membership itself failed; retrying")
			return false, nil
		}
		return true, nil
	})
}

// refuseManagedMembership fails when the API shows that the distribution already removes etcd
// members as Nodes go (k3s/RKE2's Node finalizer, k0s's EtcdMember kind): two controllers removing
// members, each unaware of the other's quorum checks and in-flight changes, could together remove
// more than either would alone.
func refuseManagedMembership(ctx context.Context, cfg *rest.Config) error {
	// Discovery takes no context: the config's timeout bounds it.
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = status.APITimeout
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("checking for k0s: %w", err)
	}
	groups, err := disco.ServerGroups()
	if err != nil {
		return fmt.Errorf("checking for k0s: %w", err)
	}
	if slices.ContainsFunc(groups.Groups, func(g metav1.APIGroup) bool { return g.Name == k0sEtcdGroup }) {
		return managedElsewhere(fmt.Sprintf("--leave-on-node-delete refused: the API serves %s (etcdmembers.%s): k0s manages etcd membership itself; run the agents without --leave-on-node-delete, or not at all (docs/install.md)",
			k0sEtcdGroup, k0sEtcdGroup))
	}
	client, err := metadata.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("checking for k3s/RKE2: %w", err)
	}
	var managed string
	err = controller.ListNodes(ctx, client, func(node *metav1.PartialObjectMetadata) {
		if managed == "" && slices.Contains(node.Finalizers, k3sEtcdFinalizer) {
			managed = node.Name
		}
	})
	if err != nil {
		return fmt.Errorf("checking for k3s/RKE2: %w", err)
	}
	if managed != "" {
		return managedElsewhere(fmt.Sprintf("--leave-on-node-delete refused: Node %s carries the finalizer %s: k3s/RKE2 remove a deleted Node's etcd member themselves; run the agents without --leave-on-node-delete, or not at all (docs/install.md)",
			managed, k3sEtcdFinalizer))
	}
	return nil
}
