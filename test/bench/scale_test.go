//go:build bench

package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// benchScale times full resyncs of scaleVoters members and historyObjects objects of members
// that left, each after the leading agent was SIGKILLed.
func benchScale(t *testing.T, r *results) {
	e := newEnv(t, scaleVoters)
	e.createHistory(historyObjects)
	total := scaleVoters + historyObjects
	e.waitSteady(total)
	r.scaleObjects = total
	for i := range resyncRuns {
		s := e.resyncOnce(total)
		t.Logf("resync %d/%d: %s to a drained queue, %s to the full objects gauge, %.0f writes",
			i+1, resyncRuns, s.reconciled, s.gauge, s.writes)
		r.resync = append(r.resync, s)
	}
	e.benchPluginList(r)
}

// historyIDBase starts the fake member IDs of the history objects. etcd draws IDs at random
// from all 64 bits, so these never name a live member.
const historyIDBase = 0xfeed_0000_0000_0000

// createHistory creates n objects the way the leader leaves a member that left on request.
func (e *env) createHistory(n int) {
	e.t.Helper()
	for i := range n {
		obj := &v1alpha1.EtcdMember{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("left-%03d", i)},
			Spec:       v1alpha1.EtcdMemberSpec{Leave: true},
		}
		e.apiCall("create "+obj.Name, func(ctx context.Context) error { return e.client.Create(ctx, obj) })
		// The leader reconciles the new object at once (it records no member ID yet), so the
		// status write may meet a newer version: read it again and retry.
		e.apiCall("write status of "+obj.Name, func(ctx context.Context) error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := e.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
					return err
				}
				obj.Status = v1alpha1.EtcdMemberStatus{
					MemberID:           strconv.FormatUint(historyIDBase+uint64(i), 16),
					PeerURLs:           []string{fmt.Sprintf("http://192.0.2.%d:2380", i%250+1)},
					ObservedGeneration: obj.Generation,
				}
				msg := fmt.Sprintf("Member %s was removed from etcd on request.", obj.Status.MemberID)
				status.Set(obj, v1alpha1.ConditionJoined, metav1.ConditionFalse, v1alpha1.ReasonRemoved, msg)
				status.Set(obj, v1alpha1.ConditionLeft, metav1.ConditionTrue, v1alpha1.ReasonRemoved, msg)
				return e.client.Status().Update(ctx, obj)
			})
		})
	}
}

func (e *env) apiCall(what string, call func(context.Context) error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := call(ctx); err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
}

// waitSteady waits until the leader counts every object in its gauge and its membership reconciler
// has nothing left to do.
func (e *env) waitSteady(total int) {
	e.t.Helper()
	leader := e.agents[e.leaderAgent()]
	err := framework.Poll(settle, 200*time.Millisecond, framework.PerAttempt(callTimeout, func(ctx context.Context) (bool, error) {
		f, err := scrapeURL(ctx, leader.MetricsURL())
		if err != nil {
			return false, err
		}
		return f.sum("etcdmember_objects") == float64(total) && idle(f), nil
	}))
	if err != nil {
		e.t.Fatalf("leader %s did not settle on %d objects within %s", leader.Name, total, settle)
	}
}

// idle tells whether the membership reconciler's queue is empty and no reconcile is running.
func idle(f families) bool {
	return f.sum("workqueue_depth", "name", "leave") == 0 &&
		f.sum("controller_runtime_active_workers", "controller", "leave") == 0
}

// resyncSample is one full resync by a new leader, timed from its election.
type resyncSample struct {
	// reconciled: the new leader's membership reconciler has finished at least one reconcile per
	// object and its queue is empty.
	reconciled time.Duration
	// gauge: the new leader's etcdmember_objects gauge counts every object.
	gauge time.Duration
	// writes counts API writes to EtcdMembers from the kill to the end of the resync.
	writes float64
}

// resyncPoll is how often the new leader's metrics are read during a resync: the resolution of
// the figures, at a few milliseconds of the agent's CPU per read.
const resyncPoll = 25 * time.Millisecond

func (e *env) resyncOnce(total int) resyncSample {
	e.t.Helper()
	old := e.leaderAgent()
	before := e.reconciles()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	writesBefore := e.writes(ctx, "etcdmembers")
	elected := e.watchLeader(ctx, func(l *coordinationv1.Lease) bool {
		h := framework.LeaseHolder(l)
		return h != "" && h != old
	})
	e.agents[old].Kill(e.t)
	won := await(ctx, e.t, elected, "a new leader")
	name := framework.LeaseHolder(won.obj)
	gauge, drained := e.awaitResync(ctx, e.agents[name], before[name]+float64(total), total)
	s := resyncSample{
		reconciled: drained.Sub(won.at),
		gauge:      gauge.Sub(won.at),
		writes:     e.writes(ctx, "etcdmembers") - writesBefore,
	}
	e.agents[old].Start(e.t)
	e.waitSteady(total)
	return s
}

// reconciles returns each agent's count of finished leave reconciles.
func (e *env) reconciles() map[string]float64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	out := map[string]float64{}
	for name, a := range e.agents {
		out[name] = e.mustScrape(ctx, a).sum("controller_runtime_reconcile_total", "controller", "leave")
	}
	return out
}

// awaitResync reads the agent's metrics every resyncPoll until its objects gauge has counted
// total objects and its membership reconciler, having finished wantReconciles reconciles, is idle;
// it returns when each was first seen.
func (e *env) awaitResync(ctx context.Context, a *framework.Agent, wantReconciles float64, total int) (gauge, drained time.Time) {
	e.t.Helper()
	tick := time.NewTicker(resyncPoll)
	defer tick.Stop()
	for gauge.IsZero() || drained.IsZero() {
		f, err := scrapeURL(ctx, a.MetricsURL())
		now := time.Now()
		if err == nil && gauge.IsZero() && f.sum("etcdmember_objects") == float64(total) {
			gauge = now
		}
		if err == nil && drained.IsZero() && f.sum("controller_runtime_reconcile_total", "controller", "leave") >= wantReconciles && idle(f) {
			drained = now
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("agent %s: resync not seen: %v", a.Name, ctx.Err())
		case <-tick.C:
		}
	}
	return gauge, drained
}

// writes counts the apiserver's write requests for a resource so far.
func (e *env) writes(ctx context.Context, resource string) float64 {
	e.t.Helper()
	f, err := e.scrapeAPIServer(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var n float64
	for key, v := range f.sumBy("apiserver_request_total", requestKey) {
		verb, res, _ := strings.Cut(key, " ")
		if writeVerbs[verb] && strings.Split(res, "/")[0] == resource {
			n += v
		}
	}
	return n
}

// writeVerbs are the apiserver's verbs that change state.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "DELETECOLLECTION": true, "APPLY": true}
