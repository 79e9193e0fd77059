//go:build bench

package bench

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

const (
	callTimeout = 10 * time.Second
	// settle bounds one measured step or one re-join; far above anything measured, it only turns
	// a hang into a failure.
	settle = time.Minute
	// reconfigGrace is how long after a re-joined member serves etcd may refuse to remove a
	// voter: strict reconfiguration checks count only peers connected for HealthInterval (5s),
	// and with one of three just back, the rest are too few. The member connects just before it
	// serves; the margin covers the leader's side of that connection. Counting from the start of
	// the re-join instead failed when the re-join itself took over 2 s. Waiting it out keeps
	// etcd's refusals, and the controller's retries after them, out of the figures.
	reconfigGrace = 5*time.Second + time.Second
	// benchQPS lifts client-go's default limit of 5 requests per second, which would make the
	// measuring client, not etcdmember, the bottleneck.
	benchQPS = 1000
)

// env is one test bed: etcd members, an apiserver with the CRD, and an agent per member running
// with the least-privilege credential the e2e tests use.
type env struct {
	t       *testing.T
	cluster *framework.Cluster
	api     *framework.APIServer
	client  client.WithWatch
	agents  map[string]*framework.Agent
	// etcd holds a client per member on that member's endpoint only, so a poll through a member
	// that stays never lands on the one being removed.
	etcd map[string]*clientv3.Client
	// removableAt is when etcd's strict reconfiguration check will next let a voter go.
	removableAt time.Time
	// auditLog is the apiserver's audit log (auditPolicy), when envOptions.audit asked for one.
	auditLog string
}

func newEnv(t *testing.T, size int, agentArgs ...string) *env {
	t.Helper()
	return newEnvWith(t, envOptions{size: size}, agentArgs...)
}

// envOptions shape a test bed beyond its size.
type envOptions struct {
	size int
	// faultProxies puts the cluster's network paths behind fault proxies.
	faultProxies bool
	// tls serves the members' client and peer URLs with mutual TLS, as production clusters do.
	tls bool
	// separateStorage runs the apiserver on a one-member etcd of its own.
	separateStorage bool
	// audit has the apiserver write an audit log of auditPolicy.
	audit bool
	// nodes registers a Node per member, named like it, and starts each agent with --node-name
	// set to it, as the e2e tests do.
	nodes bool
	// beforeAgents runs once the apiserver serves the CRD, before any agent starts.
	beforeAgents func(*env)
}

func newEnvWith(t *testing.T, o envOptions, agentArgs ...string) *env {
	t.Helper()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: o.size, FaultProxies: o.faultProxies, TLS: o.tls})
	removableAt := time.Now().Add(reconfigGrace)
	storage := c
	if o.separateStorage {
		storage = framework.NewCluster(t, framework.ClusterConfig{Size: 1})
	}
	api := framework.StartAPIServer(t, storage)
	var auditLog string
	if o.audit {
		auditLog = api.EnableAudit(t, auditPolicy)
	}
	api.InstallEtcdmember(t)
	e := &env{
		t: t, cluster: c, api: api, client: adminClient(t, api),
		agents: map[string]*framework.Agent{}, etcd: map[string]*clientv3.Client{},
		removableAt: removableAt, auditLog: auditLog,
	}
	if o.beforeAgents != nil {
		o.beforeAgents(e)
	}
	_, kubeconfig := api.User(t, "etcdmember-agent", "etcdmember:agents")
	args := append([]string{"--kubeconfig=" + kubeconfig}, agentArgs...)
	for _, m := range c.Members() {
		memberArgs := args
		if o.nodes {
			api.RegisterNode(t, m.Name)
			memberArgs = append(slices.Clone(args), "--node-name="+m.Name)
		}
		e.agents[m.Name] = framework.StartAgent(t, m, api, memberArgs...)
		e.etcd[m.Name] = m.Client(t)
	}
	return e
}

func adminClient(t *testing.T, api *framework.APIServer) client.WithWatch {
	t.Helper()
	return api.ObjectClient(t, benchQPS)
}

// leaderAgent returns the name of the agent holding the leader Lease, waiting for one.
func (e *env) leaderAgent() string {
	e.t.Helper()
	return e.api.LeaderAgent(e.t)
}

// pickTarget returns the member to remove next, a non-leader voter whose agent does not lead,
// and the leading agent's member, which stays and is polled. Both conditions keep the leave on
// its plain path: no hand-over of agent leadership, no MoveLeader.
func (e *env) pickTarget() (target, stay *framework.Member) {
	e.t.Helper()
	leaderAgent := e.leaderAgent()
	etcdLeader := e.cluster.Leader(e.t).Name
	for _, m := range e.cluster.Members() {
		if m.Name != leaderAgent && m.Name != etcdLeader {
			return m, e.cluster.Member(leaderAgent)
		}
	}
	e.t.Fatalf("no member is free of both leaderships (agent leader %s, etcd leader %s)", leaderAgent, etcdLeader)
	return nil, nil
}

// removal is one timed removal as it starts: the member to remove, a client on the leading
// agent's member, which stays, and the arrival of the first member list without the target.
type removal struct {
	target *framework.Member
	cli    *clientv3.Client
	gone   <-chan time.Time
}

// startRemoval picks the member to remove (pickTarget), waits until etcd lets it go and starts
// polling for its absence, until ctx ends.
func (e *env) startRemoval(ctx context.Context) removal {
	e.t.Helper()
	target, stay := e.pickTarget()
	e.waitRemovable()
	cli := e.etcd[stay.Name]
	return removal{target: target, cli: cli, gone: goneAt(ctx, cli, target.ID())}
}

// waitRemovable sleeps until etcd's strict reconfiguration check accepts a voter's removal.
func (e *env) waitRemovable() { time.Sleep(time.Until(e.removableAt)) }

// patchLeave asks for the member's removal the way `kubectl patch` does.
func (e *env) patchLeave(ctx context.Context, name string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	obj := &v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := e.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"leave":true}}`))); err != nil {
		e.t.Fatalf("patch spec.leave of %s: %v", name, err)
	}
}

// rejoin brings a removed member back as a wiped node returns, and waits until its agent has
// taken the object over with the new member ID.
func (e *env) rejoin(m *framework.Member) {
	e.t.Helper()
	e.cluster.Rejoin(e.t, m, false)
	e.removableAt = time.Now().Add(reconfigGrace)
	id := m.IDHex()
	e.waitMember(m.Name, "re-joined as "+id, func(obj *v1alpha1.EtcdMember) bool {
		return obj.Status.MemberID == id && status.IsTrue(obj, v1alpha1.ConditionJoined) && !obj.Spec.Leave
	})
}

// waitMember polls the object until ok holds; for waits whose duration is not measured.
func (e *env) waitMember(name, what string, ok func(*v1alpha1.EtcdMember) bool) {
	e.t.Helper()
	err := framework.Poll(settle, 50*time.Millisecond, framework.PerAttempt(callTimeout, func(ctx context.Context) (bool, error) {
		obj := &v1alpha1.EtcdMember{}
		if err := e.client.Get(ctx, types.NamespacedName{Name: name}, obj); err != nil {
			return false, err
		}
		return ok(obj), nil
	}))
	if err != nil {
		e.t.Fatalf("EtcdMember %s: %s not reached within %s", name, what, settle)
	}
}

// sighting is the moment a watched object first met a condition, and the object then.
type sighting[T client.Object] struct {
	at  time.Time
	obj T
}

// watchUntil opens a watch and returns a channel that receives the first object for which ok
// holds, stamped with the arrival of its event. The watch is established when watchUntil
// returns, so no change made afterwards is missed; it ends with ctx.
func watchUntil[T client.Object](ctx context.Context, t *testing.T, cl client.WithWatch, list client.ObjectList, ok func(T) bool, opts ...client.ListOption) <-chan sighting[T] {
	t.Helper()
	w, err := cl.Watch(ctx, list, opts...)
	if err != nil {
		t.Fatalf("watch %T: %v", list, err)
	}
	ch := make(chan sighting[T], 1)
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if obj, isT := ev.Object.(T); isT && ok(obj) {
				ch <- sighting[T]{at: time.Now(), obj: obj}
				return
			}
		}
	}()
	return ch
}

// watchMember watches one EtcdMember until ok holds.
func (e *env) watchMember(ctx context.Context, name string, ok func(*v1alpha1.EtcdMember) bool) <-chan sighting[*v1alpha1.EtcdMember] {
	e.t.Helper()
	return watchUntil(ctx, e.t, e.client, &v1alpha1.EtcdMemberList{}, ok, client.MatchingFields{"metadata.name": name})
}

// watchLeader watches the leader Lease until ok holds.
func (e *env) watchLeader(ctx context.Context, ok func(*coordinationv1.Lease) bool) <-chan sighting[*coordinationv1.Lease] {
	e.t.Helper()
	return watchUntil(ctx, e.t, e.client, &coordinationv1.LeaseList{}, ok,
		client.InNamespace("kube-system"), client.MatchingFields{"metadata.name": v1alpha1.LeaseName})
}

// await receives from ch, failing the test when ctx ends first.
func await[V any](ctx context.Context, t *testing.T, ch <-chan V, what string) V {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("%s: not seen: %v", what, ctx.Err())
		panic("unreachable")
	}
}

// goneInterval is how often goneAt polls etcd's member list. It bounds the resolution of every
// "gone" figure: a raw MemberRemove answers in about 2 ms, and with the 5 ms used before, the floor
// was mostly the poll's first tick, and a leave's ratio to it jumped between runs with the tick its
// removal fell just before or after.
const goneInterval = time.Millisecond

// goneAt polls the member list through cli every goneInterval and sends the arrival time of the
// first answer that no longer lists id. Failed calls are polled through: a removal can make the
// cluster briefly busy, and that must not end the measurement.
func goneAt(ctx context.Context, cli *clientv3.Client, id uint64) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		tick := time.NewTicker(goneInterval)
		defer tick.Stop()
		for {
			if listed, err := inMemberList(ctx, cli, id); err == nil && !listed {
				ch <- time.Now()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return ch
}

// intentStoredAt watches the leader's removal intent for id through cli and sends the arrival time
// of its first write. It returns once the watch is established, so nothing written after the
// call is missed.
func intentStoredAt(ctx context.Context, t *testing.T, cli *clientv3.Client, id uint64) <-chan time.Time {
	t.Helper()
	ch := make(chan time.Time, 1)
	events := cli.Watch(ctx, etcd.RemovalIntentKey(id), clientv3.WithCreatedNotify())
	if resp, ok := <-events; !ok || !resp.Created {
		t.Fatalf("watching the removal intent of %s: %v", etcd.IDString(id), resp.Err())
	}
	go func() {
		for resp := range events {
			if len(resp.Events) > 0 {
				ch <- time.Now()
				return
			}
		}
	}()
	return ch
}

func inMemberList(ctx context.Context, cli *clientv3.Client, id uint64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return false, err
	}
	return framework.FindMember(resp.Members, id) != nil, nil
}
