package members

import (
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// Roles a member plays in raft.
const (
	RoleLeader  = "leader"
	RoleVoter   = "voter"
	RoleLearner = "learner"
)

// Notes that make a row stand out.
const (
	NoteDiscovered   = "discovered"
	NoteNoObject     = "no EtcdMember object"
	NoteNotInEtcd    = "not in etcd"
	NoteBackInEtcd   = "in etcd, object says left"
	NoteNoMemberID   = "no member ID recorded"
	NoteNeverStarted = "never started"
	// NoteNodeGone: the member is in etcd, and the Node it is bound to does not exist (see Nodes).
	NoteNodeGone = "node gone"
	// NoteRemovedElsewhere: Joined=False/NotFound, the member went from etcd without a leave
	// (kubeadm reset removes its node's own member, so does etcdctl member remove).
	NoteRemovedElsewhere = "removed from etcd, not by etcdmember"
)

// Row is one line of the list: an EtcdMember object joined with the etcd member it records, or a
// member etcd lists that no object records. Without etcd access every field comes from what the
// leading agent recorded in the object; with it, etcd's live answer wins where it has one.
type Row struct {
	// Object is nil for an etcd member no object records.
	Object   *v1alpha1.EtcdMember
	Name     string
	MemberID string
	EtcdName string
	PeerURLs []string
	// ClientURLs are empty for a member that never started.
	ClientURLs []string
	// Role is leader, voter or learner; empty when the member is not in etcd.
	Role string
	// Joined and Healthy are condition statuses (True, False), or empty when unknown.
	Joined  string
	Healthy string
	// Leave is empty when no leave was asked for, "Requested" until the controller answers, then
	// the Left condition's reason (Removed, QuorumAtRisk, ...).
	Leave     string
	RaftTerm  *uint64
	RaftIndex *uint64
	DBSize    *int64
	// Version is etcd's version, known only from a live answer.
	Version   string
	LastProbe *metav1.Time
	Created   *metav1.Time
	// Node is the Node the object binds the member to (v1alpha1.EtcdMember.BoundNode); empty for
	// none.
	Node string
	// Live tells that etcd was asked; InEtcd then says whether it lists the member.
	Live   bool
	InEtcd bool
	Notes  []string
}

// LeaveRequested is the LEAVE state of a request the controller has not answered yet.
const LeaveRequested = "Requested"

// BuildRows joins the objects with etcd's live view by member ID; live is nil when etcd was not
// asked, nodes nil when the Nodes were not read. Objects come first, by name, then members without
// an object, by etcd name and ID. Members whose bound Node is gone and stale members (see Plan)
// carry a note saying so.
func BuildRows(objects []v1alpha1.EtcdMember, live *Live, nodes Nodes, now time.Time, unreachableFor time.Duration) []Row {
	j := newJoin(live)
	rows := make([]Row, 0, len(objects))
	for i := range objects {
		r := j.object(&objects[i])
		// Only a member etcd still lists: a member that left with its Node is history, not news.
		if r.Role != "" && nodes.Gone(r.Node) {
			r.Notes = append(r.Notes, NoteNodeGone)
		}
		rows = append(rows, r)
	}
	sort.SliceStable(rows, func(a, b int) bool { return rows[a].Name < rows[b].Name })
	rows = append(rows, j.orphans()...)
	for _, p := range Plan(objects, live, nodes, now, unreachableFor) {
		if p.Action != ActionPrune && p.Action != ActionDelete {
			continue
		}
		for i := range rows {
			if rows[i].Name == p.Name && p.Name != "" {
				rows[i].Notes = append(rows[i].Notes, "stale: "+p.Why)
			}
		}
	}
	return rows
}

// ObjectRow is the row of an object as the leading agent recorded it, with no live view.
func ObjectRow(m *v1alpha1.EtcdMember) Row {
	r := Row{
		Object:     m,
		Name:       m.Name,
		MemberID:   m.Status.MemberID,
		EtcdName:   recordedEtcdName(m),
		PeerURLs:   m.Status.PeerURLs,
		ClientURLs: m.Status.ClientURLs,
		Created:    &m.CreationTimestamp,
		Node:       m.BoundNode(),
	}
	if c := status.Get(m, v1alpha1.ConditionJoined); c != nil {
		r.Joined = string(c.Status)
	}
	if c := status.Get(m, v1alpha1.ConditionHealthy); c != nil {
		r.Healthy = string(c.Status)
	}
	if r.Joined == string(metav1.ConditionTrue) {
		r.Role = RoleVoter
		switch {
		case m.Status.IsLearner:
			r.Role = RoleLearner
		case m.Status.Health != nil && m.Status.Health.Leader:
			r.Role = RoleLeader
		}
	}
	if h := m.Status.Health; h != nil {
		term, index := uint64(max(h.RaftTerm, 0)), uint64(max(h.RaftIndex, 0))
		r.RaftTerm, r.RaftIndex, r.DBSize = &term, &index, &h.DBSizeBytes
		r.LastProbe = &h.LastProbeTime
	}
	// A Left condition computed for an older generation answers an earlier request.
	switch c := status.Get(m, v1alpha1.ConditionLeft); {
	case c != nil && c.Status == metav1.ConditionTrue:
		r.Leave = c.Reason
	case m.Spec.Leave && c != nil && c.ObservedGeneration >= m.Generation:
		r.Leave = c.Reason
	case m.Spec.Leave:
		r.Leave = LeaveRequested
	}
	if m.Labels[v1alpha1.LabelDiscovered] == "true" {
		r.Notes = append(r.Notes, NoteDiscovered)
	}
	if r.Joined == string(metav1.ConditionFalse) && status.HasReason(m, v1alpha1.ConditionJoined, v1alpha1.ReasonNotFound) {
		r.Notes = append(r.Notes, NoteRemovedElsewhere)
	}
	return r
}

// recordedEtcdName is the member's etcd name as the object records it: status.name is kept only
// where it differs from the object's name, and a member that never started (no client URLs) has
// no name at all.
func recordedEtcdName(m *v1alpha1.EtcdMember) string {
	if m.Status.Name != "" || len(m.Status.ClientURLs) == 0 {
		return m.Status.Name
	}
	return m.Name
}

// join matches objects to etcd members and remembers which members found an object.
type join struct {
	live        *Live
	listed      map[uint64]etcd.Member
	claimed     map[uint64]bool
	leader      uint64
	leaderKnown bool
}

func newJoin(live *Live) *join {
	j := &join{live: live, listed: map[uint64]etcd.Member{}, claimed: map[uint64]bool{}}
	if live != nil {
		for _, m := range live.Members {
			j.listed[m.ID] = m
		}
	}
	j.leader, j.leaderKnown = live.leader()
	return j
}

func (j *join) object(obj *v1alpha1.EtcdMember) Row {
	r := ObjectRow(obj)
	if j.live == nil {
		if r.MemberID == "" {
			r.Notes = append(r.Notes, NoteNoMemberID)
		}
		return r
	}
	r.Live = true
	id, err := etcd.ParseID(r.MemberID)
	m, ok := j.listed[id]
	r.InEtcd = err == nil && ok
	switch {
	case r.InEtcd:
		j.claimed[id] = true
		if r.Joined == string(metav1.ConditionFalse) {
			// Back under the same ID: the object's record of its removal is what lags.
			r.Notes = slices.DeleteFunc(r.Notes, func(n string) bool { return n == NoteRemovedElsewhere })
			r.Notes = append(r.Notes, NoteBackInEtcd)
		}
		j.merge(&r, m)
	case r.MemberID == "":
		r.Notes = append(r.Notes, NoteNoMemberID)
	default:
		r.Role, r.Healthy, r.RaftTerm, r.RaftIndex, r.DBSize = "", "", nil, nil, nil
		if r.Joined == string(metav1.ConditionTrue) {
			r.Notes = append(r.Notes, NoteNotInEtcd)
		}
	}
	return r
}

// orphans are the members no object claimed, sorted by etcd name and ID.
func (j *join) orphans() []Row {
	var rows []Row
	for id, m := range j.listed {
		if j.claimed[id] {
			continue
		}
		r := Row{MemberID: etcd.IDString(id), Live: true, InEtcd: true, Notes: []string{NoteNoObject}}
		j.merge(&r, m)
		rows = append(rows, r)
	}
	sort.Slice(rows, func(a, b int) bool {
		if rows[a].EtcdName != rows[b].EtcdName {
			return rows[a].EtcdName < rows[b].EtcdName
		}
		return idLess(rows[a].MemberID, rows[b].MemberID)
	})
	return rows
}

// merge lays etcd's live view of member m over r, noting where the object's record disagrees.
func (j *join) merge(r *Row, m etcd.Member) {
	recorded := *r
	r.EtcdName = m.Name
	r.PeerURLs, r.ClientURLs = m.PeerURLs, m.ClientURLs
	r.Role = RoleVoter
	if m.IsLearner {
		r.Role = RoleLearner
	}
	st, answered := j.live.Status[m.ID]
	r.Healthy = string(metav1.ConditionFalse)
	if answered {
		r.Healthy = string(metav1.ConditionTrue)
		term, index := st.RaftTerm, st.RaftIndex
		r.RaftTerm, r.RaftIndex, r.DBSize, r.Version = &term, &index, &st.DBSize, st.Version
	}
	if j.leaderKnown && m.ID == j.leader {
		r.Role = RoleLeader
	}
	if m.Name == "" {
		r.Notes = append(r.Notes, NoteNeverStarted)
	}
	if recorded.Object == nil {
		return
	}
	if recorded.Role != "" && recorded.Role != r.Role && (recorded.Role == RoleLearner || r.Role == RoleLearner) {
		r.Notes = append(r.Notes, "etcd says "+r.Role+", object says "+recorded.Role)
	}
	if len(recorded.PeerURLs) > 0 && !slices.Equal(recorded.PeerURLs, m.PeerURLs) {
		r.Notes = append(r.Notes, "etcd peer URLs differ from the object's "+strings.Join(recorded.PeerURLs, ","))
	}
	if recorded.Healthy != "" && recorded.Healthy != r.Healthy {
		r.Notes = append(r.Notes, "object says Healthy="+recorded.Healthy)
	}
}
