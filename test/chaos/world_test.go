package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// Bounds of the waits. They are far above what the steps take on an idle machine: on 2 cores
// shared with other test runs, a bound only turns a hang into a finding, and a tight one would
// report the machine's load instead.
const (
	callTimeout = 5 * time.Second
	// settleBound is how long after every fault is healed each leave of the scenario has to reach
	// its outcome, and the objects to match etcd again.
	settleBound = 90 * time.Second
	// removedBound is how long a rejoin step waits for its member's removal before skipping.
	removedBound = 30 * time.Second
	// crashBound is how long a crash scenario waits for the armed agent to reach its failpoint.
	crashBound = 60 * time.Second
	// agentReadyBound is how long an agent restarted on a serving member may take to register.
	agentReadyBound = 45 * time.Second
	// lostWriteLands is how long after every fault is healed a write whose answer was lost may
	// still land: a frozen member reads the apiserver's request only once it is resumed, and etcd
	// then waits for it to apply for its request timeout (5 s and two election timeouts, 7 s at
	// the etcd defaults the framework keeps), plus 3 s for the member to catch up first. Until
	// then, a request seen not to have landed is not judged as never sent.
	lostWriteLands = 10 * time.Second
)

// clientQPS lifts client-go's default of 5 requests per second: the monitor alone reads the
// objects several times a second.
const clientQPS = 100

// world is the one test bed every scenario of a run shares: etcd members, kube-apiserver with
// the CRD and RBAC of config/default, and an agent per member with the least-privilege
// credential. Member i runs on node i+1, and agents[i] is its agent; the Node object of node i+1
// is named like the member, and the agent runs with --node-name set to it.
type world struct {
	t       *testing.T
	cluster *framework.Cluster
	api     *framework.APIServer
	client  client.Client
	members []*framework.Member
	agents  []*framework.Agent
	// etcd holds a client per member on that member's endpoint only, so a call never waits on a
	// member the injector froze: the caller picks one that runs.
	etcd []*clientv3.Client
}

func newWorld(t *testing.T, size int, agentArgs []string) *world {
	t.Helper()
	// Every network path goes through a fault proxy, for the network faults; the harness's own
	// etcd clients bypass them (ListenClientURL), so that it always sees the truth.
	c := framework.NewCluster(t, framework.ClusterConfig{Size: size, FaultProxies: true})
	api := framework.StartAPIServer(t, c)
	api.InstallEtcdmember(t)
	w := &world{t: t, cluster: c, api: api, members: c.Members()}

	w.client = api.ObjectClient(t, clientQPS)

	_, kubeconfig := api.User(t, "etcdmember-agent", "etcdmember:agents")
	for _, m := range w.members {
		// Registered before its agent starts, as a kubelet registers its Node on boot.
		api.RegisterNode(t, m.Name)
		args := append([]string{"--kubeconfig=" + kubeconfig, "--node-name=" + m.Name}, agentArgs...)
		w.agents = append(w.agents, framework.StartAgent(t, m, api, args...))
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{m.ListenClientURL()},
			DialTimeout: callTimeout,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		w.etcd = append(w.etcd, cli)
	}
	return w
}

// memberList reads etcd's member list (a linearizable read) through the first of the members in
// order that answers.
func (w *world) memberList(ctx context.Context, order []int) (*clientv3.MemberListResponse, error) {
	var errs []error
	for _, i := range order {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := w.etcd[i].MemberList(cctx)
		cancel()
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", nodeName(i), err))
	}
	return nil, errors.Join(errs...)
}

// memberIndex maps an etcd member ID to the framework member that has it now, or -1.
func (w *world) memberIndex(id uint64) int {
	return slices.IndexFunc(w.members, func(m *framework.Member) bool { return m.ID() == id })
}

// etcdLeader returns the index of the member that leads etcd, asking the members in order.
func (w *world) etcdLeader(order []int) (int, bool) {
	for _, i := range order {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := w.etcd[i].Status(ctx, w.members[i].ListenClientURL())
		cancel()
		if err == nil && st.Leader != 0 {
			if l := w.memberIndex(st.Leader); l >= 0 {
				return l, true
			}
		}
	}
	return 0, false
}

// leaderAgent returns the index of the agent holding the Lease, if any does.
func (w *world) leaderAgent() (int, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	lease, err := w.api.Clientset().CoordinationV1().Leases("kube-system").Get(ctx, v1alpha1.LeaseName, metav1.GetOptions{})
	if err != nil {
		return 0, false
	}
	name := framework.LeaseHolder(lease)
	i := slices.IndexFunc(w.members, func(m *framework.Member) bool { return m.Name == name })
	return i, i >= 0
}

func (w *world) object(ctx context.Context, name string) (*v1alpha1.EtcdMember, error) {
	obj := &v1alpha1.EtcdMember{}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := w.client.Get(ctx, types.NamespacedName{Name: name}, obj); err != nil {
		return nil, fmt.Errorf("get EtcdMember %s: %w", name, err)
	}
	return obj, nil
}

func (w *world) objects(ctx context.Context) ([]v1alpha1.EtcdMember, error) {
	var list v1alpha1.EtcdMemberList
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := w.client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list EtcdMembers: %w", err)
	}
	return list.Items, nil
}

// agentReady tells whether agent i's /readyz answers 200: it has registered its member.
func (w *world) agentReady(i int) bool {
	return framework.ReadyzOK(w.agents[i].HealthURL("readyz"), time.Second)
}

// pollEvery is how often the harness's waits try again.
const pollEvery = 200 * time.Millisecond

// retried is a check the harness retries until it returns nil, each attempt within callTimeout.
func retried(check func(ctx context.Context) error) framework.Condition {
	return framework.PerAttempt(callTimeout, framework.Succeeds(check))
}

// describe renders an object's spec and conditions on one line.
func describe(obj *v1alpha1.EtcdMember) string {
	if obj == nil {
		return "<no object>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: leave=%v memberID=%s", obj.Name, obj.Spec.Leave, obj.Status.MemberID)
	for _, c := range obj.Status.Conditions {
		if c.Type == v1alpha1.ConditionRemovable {
			continue
		}
		fmt.Fprintf(&b, " %s=%s/%s", c.Type, c.Status, c.Reason)
	}
	return b.String()
}
