// Package metrics defines etcdmember's Prometheus metrics. They are registered with
// controller-runtime's registry, which the agent serves on --metrics-bind-address together with
// controller-runtime's own controller and client metrics.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// EtcdMembers counts etcd's members by role, as the leader last read the member list.
	EtcdMembers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "etcdmember_etcd_members",
		Help: "Members in etcd's member list by role (voter or learner), as the leader last read it.",
	}, []string{"role"})

	// Objects counts EtcdMember objects by the state of their Joined condition.
	Objects = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "etcdmember_objects",
		Help: "EtcdMember objects by state: joined, removed, not_found, or unknown (not yet observed).",
	}, []string{"state"})

	// MemberHealthy is 1 when the leader's last probe found the member healthy.
	MemberHealthy = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "etcdmember_member_healthy",
		Help: "1 if the leader's last probe found the member healthy (a voter served a linearizable read, a learner answered; no alarm), else 0.",
	}, []string{"member", "member_id"})

	// MemberAlarm is 1 for each alarm active on a member.
	MemberAlarm = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "etcdmember_member_alarm",
		Help: "1 for each alarm (NOSPACE, CORRUPT) active on the member, as the leader last read them.",
	}, []string{"member", "member_id", "alarm"})

	// MemberDBSize is each member's backend size from the leader's last probe.
	MemberDBSize = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "etcdmember_member_db_size_bytes",
		Help: "Size of the member's backend database file, from the leader's last probe.",
	}, []string{"member", "member_id"})

	// LearnerPromotions counts learners the leader made voters.
	LearnerPromotions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "etcdmember_learner_promotions_total",
		Help: "Learners the leader promoted to voters.",
	})

	// LearnerEvictions counts learners removed for not catching up within --learner-stall-timeout,
	// by learner, so that an alert can name it. The leader creates each learner's series at 0 as
	// soon as it lists the learner: a series born at 1 shows no increase() to Prometheus.
	LearnerEvictions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "etcdmember_learner_evictions_total",
		Help: "Learners removed because they had not caught up within --learner-stall-timeout.",
	}, []string{"member", "member_id"})

	// UnreachableLeaves counts leaves the controller asked for under --remove-unreachable-after.
	UnreachableLeaves = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "etcdmember_unreachable_leaves_total",
		Help: "Leave requests the controller set itself for voters unreachable longer than --remove-unreachable-after.",
	})

	// FencedChanges counts membership changes a leader gave up right before making them, because
	// its term no longer held or the object no longer asked for the change.
	FencedChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "etcdmember_fenced_changes_total",
		Help: "Membership changes given up at the last moment: the leader's term had ended or the object no longer asked for them.",
	})

	// MemberLearner is 1 for a learner, 0 for a voter.
	MemberLearner = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "etcdmember_member_learner",
		Help: "1 if the member is a learner, 0 if it votes.",
	}, []string{"member", "member_id"})

	// LeaveRequests counts leave requests by outcome; refusals and failures are counted once per
	// change of reason, like their Events.
	LeaveRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "etcdmember_leave_requests_total",
		Help: "Leave requests by outcome: removed, not_found, refused, failed.",
	}, []string{"outcome"})

	// LeaveDuration measures from the leader first seeing a leave request to the member's removal.
	LeaveDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "etcdmember_leave_duration_seconds",
		Help:    "Time from the leader first seeing a leave request to the member being removed from etcd.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	})

	// GuardRefusals counts quorum guard refusals by reason.
	GuardRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "etcdmember_guard_refusals_total",
		Help: "Leave requests the quorum guard refused, by reason (QuorumAtRisk, LastVoter), once per evaluation.",
	}, []string{"reason"})

	// FaultTolerance is how many more voters may fail before etcd loses its quorum: the healthy
	// voters minus the quorum, from the leader's last probe round. No labels: a vector only so
	// that a leader stepping down can drop it.
	FaultTolerance = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "etcdmember_fault_tolerance",
		Help: "Healthy voters minus the quorum, as the leader last probed them: 0 means one more failure loses quorum, below 0 that it is lost.",
	}, nil)

	// LeavesPending counts the leave requests not yet complete (spec.leave set, Left not True).
	LeavesPending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "etcdmember_leave_requests_pending",
		Help: "Leave requests not complete yet: spec.leave is true and the Left condition is not True.",
	}, nil)

	// LeavePending is the age of each pending leave request, with the reason it waits for; the
	// oldest is their max.
	LeavePending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "etcdmember_leave_pending_seconds",
		Help: "Seconds since the leader first recorded the pending leave request (its Left condition's lastTransitionTime), by the reason it is pending.",
	}, []string{"member", "member_id", "reason"})

	// Leader is 1 while this agent leads. Every agent exports it, so that "no agent leads" is an
	// expression over present series rather than an absence.
	Leader = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "etcdmember_leader",
		Help: "1 while this agent is the leader (holds the leader Lease and runs the reconcile loop), else 0.",
	})

	// APIReconnects counts the times an agent closed its API connections after a request timed
	// out (internal/agent/apiconns.go says why).
	APIReconnects = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "etcdmember_api_reconnects_total",
		Help: "Times this agent closed its connections to the API server because a request got no answer in time; its next requests connect again, perhaps to another apiserver.",
	})

	// EtcdErrors counts failed etcd calls by method.
	EtcdErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "etcdmember_etcd_errors_total",
		Help: "Failed etcd calls by method (Status, MemberList, MemberRemove, MemberUpdate, MemberAddAsLearner, MemberPromote, MoveLeader, AlarmList, Probe, PeerTraffic, IntentPut, IntentGet, IntentDelete, LeaseGrant).",
	}, []string{"method"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(EtcdMembers, Objects, MemberHealthy, MemberLearner,
		MemberAlarm, MemberDBSize, LearnerPromotions, LearnerEvictions, UnreachableLeaves, FencedChanges,
		LeaveRequests, LeaveDuration, GuardRefusals, EtcdErrors, FaultTolerance, LeavesPending, LeavePending,
		Leader, APIReconnects)
}
