package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/quorum"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// recordForced sets GuardSkipped the first time the guard is skipped for the current request,
// which writes the ForcedLeave Warning (recordTransition), and keeps it as it is on every retry,
// by this leader or the next, so that the Warning is written once per request. An earlier
// request's record goes once a request is judged by the guard again.
func recordForced(m *v1alpha1.EtcdMember, forced bool, verdict quorum.Verdict) {
	c := status.Get(m, v1alpha1.ConditionGuardSkipped)
	switch {
	case !forced:
		status.Remove(m, v1alpha1.ConditionGuardSkipped)
	case c == nil || c.ObservedGeneration != m.Generation:
		status.Set(m, v1alpha1.ConditionGuardSkipped, metav1.ConditionTrue, v1alpha1.ReasonForced,
			fmt.Sprintf("Removing member %s without the quorum guard (annotation %s; the guard said: %s). etcd's own reconfiguration check still applies.",
				m.Status.MemberID, v1alpha1.AnnotationForceLeave, verdict.Message))
	}
}

// setRemovable answers the pre-flight question for a listed member from the latest periodic
// probe: would removing it now keep quorum?
func setRemovable(m *v1alpha1.EtcdMember, v view) {
	if v.target.IsLearner {
		status.Set(m, v1alpha1.ConditionRemovable, metav1.ConditionTrue, v1alpha1.ReasonLearner,
			"The member is a learner: removing it does not change the quorum.")
		return
	}
	if !v.probed {
		return
	}
	setRemovableFrom(m, quorum.CheckRemoval(quorumVoters(v.members, v.probes), v.target.ID, m.Name))
}

// setRemovableFrom writes a voter's Removable condition from a verdict of the quorum guard.
func setRemovableFrom(m *v1alpha1.EtcdMember, verdict quorum.Verdict) {
	switch {
	case verdict.Allowed:
		status.Set(m, v1alpha1.ConditionRemovable, metav1.ConditionTrue, v1alpha1.ReasonQuorumKept, verdict.Message+".")
	case verdict.LastVoter:
		status.Set(m, v1alpha1.ConditionRemovable, metav1.ConditionFalse, v1alpha1.ReasonLastVoter,
			verdict.Message+". Add another member before removing this one.")
	default:
		status.Set(m, v1alpha1.ConditionRemovable, metav1.ConditionFalse, v1alpha1.ReasonQuorumAtRisk,
			verdict.Message+". Bring the unhealthy members back, or remove them first.")
	}
}

// quorumVoters lists the voting members with their health from the periodic probes.
func quorumVoters(members []etcd.Member, probes Probes) []quorum.Voter {
	var voters []quorum.Voter
	for _, mem := range members {
		if !mem.IsLearner {
			voters = append(voters, quorum.Voter{ID: mem.ID, Name: mem.Name, Healthy: probes.Healthy(mem.ID)})
		}
	}
	return voters
}

// voter is a voting member with the outcome of a direct probe.
type voter struct {
	etcd.Member
	Healthy bool
	// Leader is the leader the member follows, as it answered the probe; 0 when it did not.
	Leader uint64
	// AnsweredBy is the other member that answered on this voter's client URLs, if one did.
	AnsweredBy uint64
}

// probeVoters probes every voting member except skip, each over its pooled connection and in
// parallel, so the whole check costs one probe timeout at most. The target's own health does not
// change the verdict: it is leaving either way.
func probeVoters(ctx context.Context, peers Peers, members []etcd.Member, skip uint64, timeout time.Duration) []voter {
	var (
		voters []voter
		wg     sync.WaitGroup
	)
	for _, m := range members {
		if !m.IsLearner {
			voters = append(voters, voter{Member: m})
		}
	}
	for i := range voters {
		if voters[i].ID == skip {
			continue
		}
		wg.Go(func() {
			h := peers.Probe(ctx, voters[i].Member, timeout)
			voters[i].Healthy, voters[i].Leader, voters[i].AnsweredBy = h.Serving, h.Status.Leader, h.AnsweredBy
			if h.Err != nil {
				logf.FromContext(ctx).V(1).Info("Voter unhealthy", "member", voters[i].Name, "error", h.Err.Error())
			}
		})
	}
	wg.Wait()
	return voters
}

// checkRemoval runs the quorum guard on the probed voters. A voter whose client URLs another
// member answered counts as unhealthy, and the verdict names it, so that an operator sees why a
// member that looks up elsewhere was not counted.
func checkRemoval(voters []voter, target etcd.Member, name string) quorum.Verdict {
	qv := make([]quorum.Voter, 0, len(voters))
	var answeredByOther []string
	for _, v := range voters {
		qv = append(qv, quorum.Voter{ID: v.ID, Name: v.Name, Healthy: v.Healthy})
		if v.AnsweredBy != 0 && v.ID != target.ID {
			answeredByOther = append(answeredByOther, fmt.Sprintf("%s (%s) was answered by member %s",
				etcd.IDString(v.ID), strings.Join(v.ClientURLs, ","), etcd.IDString(v.AnsweredBy)))
		}
	}
	verdict := quorum.CheckRemoval(qv, target.ID, name)
	if len(answeredByOther) > 0 {
		verdict.Message += "; counted unhealthy: " + strings.Join(answeredByOther, ", ")
	}
	return verdict
}
