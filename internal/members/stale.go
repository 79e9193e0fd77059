package members

import (
	"fmt"
	"net/url"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// DefaultUnreachableFor is how long a member must have been unhealthy before it counts as stale.
const DefaultUnreachableFor = 10 * time.Minute

// Action is what prune-stale does about one member.
type Action string

// Actions of a plan.
const (
	// ActionPrune asks the member to leave through the controller, the quorum guard included.
	ActionPrune Action = "leave"
	// ActionDelete deletes a discovered object whose member is gone from etcd already.
	ActionDelete Action = "delete object"
	// ActionNone leaves the member alone; Why says why it is listed at all.
	ActionNone Action = "none"
)

// Candidate is one line of a prune plan.
type Candidate struct {
	Name     string
	MemberID string
	PeerURLs []string
	Why      string
	Action   Action
	// Discovered objects of pruned members are deleted once their member is gone: no node will
	// come back under them. A registered node's object stays as history.
	Discovered bool
}

// ActionText is the ACTION column of the plan.
func (c Candidate) ActionText() string {
	switch {
	case c.Action == ActionPrune && c.Discovered:
		return "leave, then delete object"
	case c.Action == ActionPrune:
		return "leave (object stays as history)"
	}
	return string(c.Action)
}

// entry is a member etcd lists (or, without etcd access, that an object says is joined).
type entry struct {
	obj      *v1alpha1.EtcdMember
	id       string
	etcdName string
	peerURLs []string
	learner  bool
	healthy  bool
	// down is how long the member has been unhealthy, by the Healthy condition's clock.
	down time.Duration
}

// Plan finds the stale members: members etcd lists but no node stands behind. A member is stale
// when it is superseded (another healthy member has its etcd name or its peer address: the old
// member of a node that came back), when nobody registered it (a discovered object, or a learner
// that never started), or when the Node it is bound to does not exist (as nodes says; nil nodes
// say nothing), and in every case it has been unhealthy for at least unreachableFor. A registered
// member that is merely down is not stale (it may be under maintenance): it is listed with
// ActionNone, and so is the only voter whose Node is gone, which etcd cannot run without.
// Healthy members are never listed. Discovered objects whose member is gone from etcd are listed
// for deletion.
func Plan(objects []v1alpha1.EtcdMember, live *Live, nodes Nodes, now time.Time, unreachableFor time.Duration) []Candidate {
	entries, gone := entries(objects, live, now)
	var plan []Candidate
	for _, e := range entries {
		if e.healthy {
			continue
		}
		c := Candidate{MemberID: e.id, PeerURLs: e.peerURLs, Action: ActionNone}
		var nodeGone string
		if e.obj != nil {
			c.Name = e.obj.Name
			c.Discovered = e.obj.Labels[v1alpha1.LabelDiscovered] == "true"
			if n := e.obj.BoundNode(); nodes.Gone(n) {
				nodeGone = n
			}
		}
		downFor := fmt.Sprintf("unhealthy for %s", duration.HumanDuration(e.down))
		var why string
		switch by := supersededBy(e, entries); {
		case e.obj == nil:
			c.Why = "no EtcdMember object yet; " + downFor + " (the leading agent creates one)"
			plan = append(plan, c)
			continue
		case by != "":
			why = "superseded by " + by
		case c.Discovered:
			why = "discovered: no agent registered it"
		case e.learner && e.etcdName == "":
			why = "learner that never started"
		case nodeGone != "" && lastVoter(e, entries):
			c.Why = "bound Node " + nodeGone + " does not exist; " + downFor + ": not pruned, the only voter"
			plan = append(plan, c)
			continue
		case nodeGone != "":
			why = "bound Node " + nodeGone + " does not exist"
		default:
			c.Why = "registered member " + downFor + ": not pruned, may be under maintenance; use leave"
			plan = append(plan, c)
			continue
		}
		if e.down < unreachableFor {
			c.Why = fmt.Sprintf("%s; %s, less than --unreachable-for %s", why, downFor, duration.HumanDuration(unreachableFor))
		} else {
			c.Why, c.Action = why+"; "+downFor, ActionPrune
		}
		plan = append(plan, c)
	}
	for _, obj := range gone {
		plan = append(plan, Candidate{
			Name: obj.Name, MemberID: obj.Status.MemberID, PeerURLs: obj.Status.PeerURLs, Discovered: true,
			Why: "discovered object whose member is gone from etcd", Action: ActionDelete,
		})
	}
	sort.SliceStable(plan, func(a, b int) bool { return plan[a].Name < plan[b].Name })
	return plan
}

// entries lists the members etcd has (each with its object, if any), and the discovered objects
// whose member it no longer has.
func entries(objects []v1alpha1.EtcdMember, live *Live, now time.Time) ([]entry, []*v1alpha1.EtcdMember) {
	byID := map[string]*v1alpha1.EtcdMember{}
	for i := range objects {
		if id := objects[i].Status.MemberID; id != "" && objects[i].DeletionTimestamp == nil {
			byID[id] = &objects[i]
		}
	}
	var out []entry
	var gone []*v1alpha1.EtcdMember
	listed := map[string]bool{}
	if live != nil {
		for _, m := range live.Members {
			id := etcd.IDString(m.ID)
			listed[id] = true
			_, answered := live.Status[m.ID]
			e := entry{obj: byID[id], id: id, etcdName: m.Name, peerURLs: m.PeerURLs, learner: m.IsLearner, healthy: answered}
			if !answered {
				e.down = downSince(e.obj, now)
			}
			out = append(out, e)
		}
	}
	for id, obj := range byID {
		joined := status.IsTrue(obj, v1alpha1.ConditionJoined)
		if live == nil && joined {
			// Not probed yet is not unhealthy: only a recorded Healthy=False counts.
			healthy := status.Get(obj, v1alpha1.ConditionHealthy) == nil || status.IsTrue(obj, v1alpha1.ConditionHealthy)
			e := entry{obj: obj, id: id, etcdName: recordedEtcdName(obj), peerURLs: obj.Status.PeerURLs, learner: obj.Status.IsLearner, healthy: healthy}
			if !healthy {
				e.down = downSince(obj, now)
			}
			out = append(out, e)
		}
		inEtcd := listed[id] || live == nil && joined
		recordedGone := live != nil || status.Get(obj, v1alpha1.ConditionJoined) != nil
		if !inEtcd && recordedGone && obj.Labels[v1alpha1.LabelDiscovered] == "true" {
			gone = append(gone, obj)
		}
	}
	sort.Slice(out, func(a, b int) bool { return idLess(out[a].id, out[b].id) })
	return out, gone
}

// downSince reads how long the Healthy condition has said False. A member etcd does not answer
// for while its object still says healthy has only just gone down, which is the safe reading.
func downSince(obj *v1alpha1.EtcdMember, now time.Time) time.Duration {
	if obj == nil {
		return 0
	}
	c := status.Get(obj, v1alpha1.ConditionHealthy)
	if c == nil || c.Status != metav1.ConditionFalse {
		return 0
	}
	return max(now.Sub(c.LastTransitionTime.Time), 0)
}

// lastVoter tells that e is the only voter etcd lists (without etcd access, the only joined
// voter the objects record, which may miss one: the safe side).
func lastVoter(e entry, all []entry) bool {
	if e.learner {
		return false
	}
	for _, o := range all {
		if o.id != e.id && !o.learner {
			return false
		}
	}
	return true
}

// supersededBy names a healthy member with e's etcd name or one of e's peer addresses, or "".
func supersededBy(e entry, all []entry) string {
	for _, o := range all {
		if o.id == e.id || !o.healthy {
			continue
		}
		name := o.id
		if o.obj != nil {
			name = o.obj.Name
		}
		if e.etcdName != "" && o.etcdName == e.etcdName {
			return fmt.Sprintf("%s (same etcd name %q)", name, e.etcdName)
		}
		if h := sharedHost(e.peerURLs, o.peerURLs); h != "" {
			return fmt.Sprintf("%s (same peer address %s)", name, h)
		}
	}
	return ""
}

// sharedHost returns a peer address (host and port) both members have: a node that came back
// at the same address. Members on one host but other ports are other members, not a successor.
func sharedHost(a, b []string) string {
	hosts := map[string]bool{}
	for _, u := range a {
		if p, err := url.Parse(u); err == nil && p.Host != "" {
			hosts[p.Host] = true
		}
	}
	for _, u := range b {
		if p, err := url.Parse(u); err == nil && hosts[p.Host] {
			return p.Host
		}
	}
	return ""
}

// idLess orders member IDs by value: hex IDs are not zero-padded, so text order is not numeric.
func idLess(a, b string) bool {
	x, errA := etcd.ParseID(a)
	y, errB := etcd.ParseID(b)
	if errA != nil || errB != nil {
		return a < b
	}
	return x < y
}
