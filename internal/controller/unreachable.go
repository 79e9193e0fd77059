package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// askUnreachableToLeave asks an unreachable voter to leave, as decideUnreachable chose, once
// etcd confirms the member down (askPeers): the leader's probes only say that the leader cannot
// reach it. since names the outage, and why is the request's leave-reason annotation.
func (r *MembershipReconciler) askUnreachableToLeave(ctx context.Context, m *v1alpha1.EtcdMember, v view, since, why string) (ctrl.Result, error) {
	log := logf.FromContext(ctx).WithValues("memberID", m.Status.MemberID)
	peers := r.askPeers(ctx, v.target, v.members, v.probes)
	reason, msg := peers.holdBack(v.target, r.RemoveUnreachableAfter, r.leaderNode(v.members))
	if reason == holdSampling {
		log.V(1).Info("Measuring whether etcd's leader still hears an unreachable member", "etcdLeader", names([]etcd.Member{*peers.leader}), "window", silenceWindow)
		return ctrl.Result{RequeueAfter: silenceWindow}, nil
	}
	if reason != "" {
		// Re-checked every --recheck-interval rather than at the next change of health: a member
		// that dies for real while cut off from the leader changes nothing the leader probes.
		r.announceHold(ctx, m, v.target.ID, since, reason, msg, peers)
		return ctrl.Result{RequeueAfter: r.RecheckInterval}, nil
	}
	if err := r.requestLeave(ctx, m, why); err != nil {
		return ctrl.Result{}, err
	}
	etcdLeader := names([]etcd.Member{*peers.leader})[0]
	log.Info("Asked an unreachable member to leave", "unhealthySince", since, "unreachableFor", v.down.Round(time.Second),
		"notHeardBy", etcdLeader, "unreadable", errorStrings(peers.errs))
	metrics.UnreachableLeaves.Inc()
	r.Events.Warning(ctx, m, v1alpha1.ReasonUnreachableMember, "Leave",
		fmt.Sprintf("Member %s has been %s, and etcd no longer hears from it either (etcd's leader %s received nothing from it for %s). Asking it to leave. The quorum guard still applies; set spec.leave to false to cancel.",
			m.Status.MemberID, why, etcdLeader, silenceWindow))
	return ctrl.Result{}, nil
}

// silenceWindow is how long etcd's leader must have received nothing from a voter before the
// policy takes it for dead. A follower answers each of the leader's heartbeats, ten a second at
// etcd's default --heartbeat-interval of 100 ms, so two seconds of silence are twenty answers
// missed; a cluster tuned to heartbeats slower than about half a second would need a longer one.
const silenceWindow = 2 * time.Second

// peerView is what the other voters' etcd says about a member the leader cannot reach.
type peerView struct {
	// heardBy are the voters that received raft messages from the member since their last read.
	heardBy []etcd.Member
	// leader is the etcd leader among the voters read, nil when none of them leads.
	leader *etcd.Member
	// sampling: the leader was read, but too recently or too briefly to tell a silence yet. A
	// leader read that is neither heard nor sampling received nothing for silenceWindow.
	sampling bool
	// errs says why the metrics of the others could not be read, one error each.
	errs []error
}

// askPeers reads etcd_network_peer_received_bytes_total for target from every other voter that
// served the leader's latest probe (a linearizable read: it has a leader and is part of the
// quorum), in parallel, within one probe timeout, and compares each with the sample the timers
// keep. A voter that answers but serves nothing may be cut off from every peer itself: that it
// received nothing from target says nothing about target.
//
// Why: the leader's probe fails when the path from the leader's node to target's client URLs
// breaks (a firewall rule, a route, a proxy), while target runs and its raft peers hear it.
// Removing it then takes a live voter out of a healthy cluster on the word of one network path.
// etcd's leader hears every voter all the time, so a voter it has received nothing from for a
// while is dead for raft, whatever its connections say: a frozen process (SIGSTOP, a hung
// machine that still answers TCP) keeps etcd_network_active_peers at 1 while it sends nothing.
func (r *MembershipReconciler) askPeers(ctx context.Context, target etcd.Member, members []etcd.Member, probes Probes) peerView {
	var observers []etcd.Member
	for _, mem := range members {
		if !mem.IsLearner && mem.ID != target.ID && probes.Members[mem.ID].Serving {
			observers = append(observers, mem)
		}
	}
	traffic := make([]etcd.Traffic, len(observers))
	errs := make([]error, len(observers))
	ctx, cancel := context.WithTimeout(ctx, r.ProbeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, o := range observers {
		wg.Go(func() {
			traffic[i], errs[i] = r.Peers.PeerTraffic(ctx, o, target.ID)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s (%s): %w", o.Name, etcd.IDString(o.ID), errs[i])
			}
		})
	}
	wg.Wait()
	var view peerView
	now := r.now()
	for i, o := range observers {
		if errs[i] != nil {
			view.errs = append(view.errs, errs[i])
			continue
		}
		leader := probes.Members[o.ID].Status.Leader
		heard, silent := r.timers.heard(target.ID, o.ID, traffic[i].Received, leader, now, silenceWindow)
		if heard {
			view.heardBy = append(view.heardBy, o)
		}
		if leader == o.ID {
			view.leader = &observers[i]
			view.sampling = !heard && !silent
		}
	}
	return view
}

// holdBack says why the view does not confirm target down, as an Event reason and message, or ""
// when it does: etcd's leader, another voter, was read and received nothing from target for
// silenceWindow, and no other voter received anything from it either. Only the leader's word
// confirms: a follower hears only the leader, so its silence about another follower says nothing.
// When the leader could not be read, nothing confirms target down, and the policy, being opt-in
// and conservative, does not ask: an operator can still ask by hand. A hold while the leader's
// silence is still being measured has no reason: it is re-checked after silenceWindow.
func (v peerView) holdBack(target etcd.Member, after time.Duration, leaderNode string) (string, string) {
	id := etcd.IDString(target.ID)
	switch {
	case len(v.heardBy) > 0:
		who := "etcd member " + strings.Join(names(v.heardBy), ", ") + " still hears"
		if len(v.heardBy) > 1 {
			who = "etcd members " + strings.Join(names(v.heardBy), ", ") + " still hear"
		}
		return v1alpha1.ReasonUnreachableFromLeader, fmt.Sprintf(
			"Member %s (%s) has been unreachable from the leading agent%s for longer than --remove-unreachable-after %s, but %s from it (raft messages received, etcd_network_peer_received_bytes_total), so it is not asked to leave. Check the network path from the leading agent's node to the member's client URLs %s. Until the leader reaches it again the quorum guard counts it unhealthy.",
			id, target.Name, leaderNode, after, who, strings.Join(target.ClientURLs, ","))
	case v.leader == nil:
		// Last in the message: the Event's note is cut at 1024 bytes, and the log has them all.
		why := "none was made: no other voter led etcd at the leading agent's latest probe"
		if len(v.errs) > 0 {
			why = strings.Join(errorStrings(v.errs), "; ")
		}
		return v1alpha1.ReasonUnreachableUnconfirmed, fmt.Sprintf(
			"Member %s (%s) has been unreachable from the leading agent%s for longer than --remove-unreachable-after %s, but etcd's leader's metrics could not be read to confirm that it no longer hears from the member, so it is not asked to leave. Let the agents read /metrics on the members' client URLs with their etcd credentials, or ask the member to leave by hand once you know it is down. The reads said: %s",
			id, target.Name, leaderNode, after, why)
	case v.sampling:
		return holdSampling, ""
	}
	return "", ""
}

// holdSampling is holdBack's reason while the leader's silence is being measured: not an Event.
const holdSampling = "sampling"

// announceHold records a hold-back in UnreachableLeaveHeld and writes its Event once per reason
// and outage (named by its start); the re-checks after it log at V(1) only. The condition says
// what an earlier leader already wrote, and the timers what this one did when the reason
// alternates.
func (r *MembershipReconciler) announceHold(ctx context.Context, m *v1alpha1.EtcdMember, id uint64, outage, reason, msg string, view peerView) {
	log := logf.FromContext(ctx).WithValues("memberID", m.Status.MemberID, "reason", reason,
		"heardBy", names(view.heardBy), "unreadable", errorStrings(view.errs))
	held := status.HasReason(m, v1alpha1.ConditionUnreachableLeaveHeld, reason)
	if !held {
		// The first message of a reason stays: its details move at every re-check, and a new
		// message would be a status write each time.
		status.Set(m, v1alpha1.ConditionUnreachableLeaveHeld, metav1.ConditionTrue, reason, msg)
	}
	if news := r.timers.announce(id, outage, reason); !news || held {
		log.V(1).Info("Still not asking an unreachable member to leave")
		return
	}
	log.Info("Not asking an unreachable member to leave: etcd does not confirm it down", "detail", msg)
	r.Events.Warning(ctx, m, reason, "Leave", msg)
}

// leaderNode names the leader's own member for a message, " (on the node of member <name>)", or
// "" when the leader's member is unknown.
func (r *MembershipReconciler) leaderNode(members []etcd.Member) string {
	if r.Leadership == nil {
		return ""
	}
	if local, ok := etcd.FindMember(members, r.Leadership.LocalMemberID()); ok {
		return fmt.Sprintf(" (on the node of member %s)", local.Name)
	}
	return ""
}

// names renders members as "name (id)".
func names(members []etcd.Member) []string {
	out := make([]string, 0, len(members))
	for _, mem := range members {
		out = append(out, fmt.Sprintf("%s (%s)", mem.Name, etcd.IDString(mem.ID)))
	}
	return out
}

func errorStrings(errs []error) []string {
	out := make([]string, 0, len(errs))
	for _, err := range errs {
		out = append(out, err.Error())
	}
	return out
}

// requestLeave asks m to leave for the reason why, keeping the status computed on m so far for
// the reconcile's one status write (an update returns the stored status); the watch on the
// changed object starts the leave.
func (r *MembershipReconciler) requestLeave(ctx context.Context, m *v1alpha1.EtcdMember, why string) error {
	updated := m.DeepCopy()
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	if err := askToLeave(ctx, r.Client, updated, why); err != nil {
		return err
	}
	m.ObjectMeta, m.Spec = updated.ObjectMeta, updated.Spec
	return nil
}

// askToLeave sets spec.leave, spec.memberID to the member m records, and the leave-reason
// annotation, as the agents' policies ask (the admission policy allows an agent no leave without
// the annotation). An update, not a patch: the agents' RBAC grants no patch on EtcdMembers, and
// the resourceVersion makes it fail rather than act on an object someone changed meanwhile.
func askToLeave(ctx context.Context, c client.Client, m *v1alpha1.EtcdMember, why string) error {
	m.Spec.Leave, m.Spec.MemberID = true, m.Status.MemberID
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[v1alpha1.AnnotationLeaveReason] = why
	if err := c.Update(ctx, m); err != nil {
		return fmt.Errorf("asking %s to leave: %w", m.Name, err)
	}
	return nil
}
