package agent

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/events"
	"github.com/etcdmember/kubectl-etcdmember/internal/members"
	"github.com/etcdmember/kubectl-etcdmember/internal/naming"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// notMemberError means the local etcd answers, as member id, but is not in the cluster's member
// list: it was removed and has not shut down yet, or it is not part of this cluster at all.
type notMemberError struct{ id uint64 }

func (e notMemberError) Error() string {
	return fmt.Sprintf("the local etcd member %s is not in the cluster's member list", etcd.IDString(e.id))
}

// Registrar keeps the local member's EtcdMember object: it creates it and binds it to the local
// member, publishes the peer URLs the node advertises, and takes the object over when the node
// re-joins as a new member. The rest of status is the leader's (see refresh). It runs on every
// agent, leader or not.
type Registrar struct {
	Reader   client.Reader
	Client   client.Client
	Etcd     *etcd.Client
	Events   *events.Recorder
	Endpoint string
	// Name overrides the local member's etcd name as the object's name.
	Name     string
	Interval time.Duration
	// PeerURLs, normalized, are the peer URLs to publish in status.advertisedPeerURLs once the
	// local etcd answers on them; empty publishes none.
	PeerURLs []string
	// OnRemoved runs after the local member was removed on request; a zero value does nothing.
	OnRemoved OnRemovedHook
	// NodeName is the Kubernetes Node this agent runs on, published in status.nodeName; empty
	// publishes none, so that a flag taken away unbinds the member.
	NodeName string

	local atomic.Uint64
	// lastSync is the outcome of the last sync, nil before the first.
	lastSync atomic.Pointer[syncResult]
	// lastLocal is what the last sync found of the local member, before it went to the API:
	// nil before the first.
	lastLocal atomic.Pointer[syncResult]

	// Only the sync loop touches these.
	last registration
	// peerWarned and identityWarned are the notes of the last PeerURLsUnverified and
	// LocalMemberChanged Warnings, so that one cause gives one Event, not one per sync.
	peerWarned     string
	identityWarned string
	// ask reads the member list from another member; nil means askMember. Tests replace it.
	ask memberAsker
}

// registration is what the last successful sync learned: which object tracks which member ID,
// and where else to ask about that member. It outlives the local etcd, which shuts itself down
// once removed.
type registration struct {
	object    string
	id        uint64
	clusterID uint64
	// others are the other members as that sync's member list recorded them.
	others []etcd.Member
}

// localView is what the local etcd endpoint says: which member it is, and the member list.
type localView struct {
	self      etcd.Member
	members   []etcd.Member
	clusterID uint64
}

// LocalMemberID returns the local member's ID, or 0 before the first successful sync. Once set,
// it changes only when the member it names is gone from etcd.
func (r *Registrar) LocalMemberID() uint64 { return r.local.Load() }

// NeedLeaderElection lets the registrar run on every agent.
func (r *Registrar) NeedLeaderElection() bool { return false }

// Start syncs now and then every Interval, counted from the end of the last sync, until ctx ends.
func (r *Registrar) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("register")
	ctx = logf.IntoContext(ctx, log)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		err := explainForbidden(r.sync(ctx))
		missing := members.NotInstalled(err)
		r.lastSync.Store(&syncResult{err: err})
		switch {
		case missing != nil:
			// An install step to take, not a fault of the agent's: no stack trace.
			log.Info("Registering the local member failed: the EtcdMember CRD is not installed; retrying", "in", r.Interval, "reason", missing.Error())
		case err != nil:
			log.Error(err, "Registering the local member failed; retrying", "in", r.Interval)
		}
	}, r.Interval)
	return nil
}

// agentsGroup is the group config/rbac binds the agent's rights to, besides the DaemonSet's
// ServiceAccount: the credential of the static pod and the systemd unit must be in it.
const agentsGroup = "etcdmember:agents"

// explainForbidden names the usual cause when the API refuses the agent: a credential made with
// another group than agentsGroup (a typo in `kubeadm kubeconfig user --org`) authenticates, and
// is allowed nothing of the agent's.
func explainForbidden(err error) error {
	if err == nil || !apierrors.IsForbidden(err) {
		return err
	}
	return fmt.Errorf("the API refused the agent's identity: config/rbac gives the agent's rights to the group %s and to the ServiceAccount kube-system/etcdmember-agent only, so check the group of its kubeconfig's user (docs/runbooks.md, \"Install on kubeadm\"): %w", agentsGroup, err)
}

// CRDInstalled fails, naming the fix, while the last sync found the EtcdMember CRD missing; it
// backs the agent's crd-installed readiness check.
func (r *Registrar) CRDInstalled() error {
	if last := r.lastSync.Load(); last != nil {
		if missing := members.NotInstalled(last.err); missing != nil {
			return missing
		}
	}
	return nil
}

// Ready reports whether the last sync succeeded, and why not; it backs the agent's readiness
// probe, whose /readyz/registered then names the cause (etcd, the API, a certificate).
func (r *Registrar) Ready() error {
	return r.lastSync.Load().explain("the last registration of the local member failed")
}

// syncResult is the outcome of one sync, or of its part that asks the local member.
type syncResult struct{ err error }

// explain is nil for a sync that succeeded, and otherwise says what failed, and why; a nil
// result is a sync that has not happened yet.
func (s *syncResult) explain(failed string) error {
	switch {
	case s == nil:
		return errors.New("local member not registered yet")
	case s.err != nil:
		return fmt.Errorf("%s: %w", failed, s.err)
	}
	return nil
}

// LocalMember reports whether the last sync reached the local member as the one registered, and
// why not, whatever the API answered after that. It gates the agent's campaign and ends a term
// whose member is gone (localguard.go). It is not Ready: on kubeadm's control plane an apiserver
// whose own etcd restarts answers nothing that needs storage, and an agent whose connection went
// there fails its registration although its member works. Counting that as a lost member kept
// every agent out of the election while the leader's node upgraded its etcd (issue #49's CI run
// of b0b67bb).
func (r *Registrar) LocalMember() error {
	return r.lastLocal.Load().explain("the last sync did not reach the local member")
}

// LocalMemberNow asks the local member now, as a sync does before it goes to the API: it answers
// as the member registered, which is still in etcd's member list. The last sync is up to an
// interval old, and its failure may be one the member has since recovered from.
func (r *Registrar) LocalMemberNow(ctx context.Context) error {
	pinned := r.local.Load()
	if pinned == 0 {
		return errors.New("local member not registered yet")
	}
	st, err := r.Etcd.Status(ctx, r.Endpoint)
	if err != nil {
		return err
	}
	if st.MemberID != pinned {
		return fmt.Errorf("the local endpoint %s answers as member %s, not %s, the one registered", r.Endpoint, etcd.IDString(st.MemberID), etcd.IDString(pinned))
	}
	members, _, err := r.Etcd.MemberListHeader(ctx)
	if err != nil {
		return err
	}
	if _, ok := etcd.FindMember(members, pinned); !ok {
		return notMemberError{id: pinned}
	}
	return nil
}

// noteLocal records what this sync found of the local member: usable only as the member pinned,
// so that a first registration, or a take-over by a re-joined member, counts once accepted.
func (r *Registrar) noteLocal(view localView, err error) {
	if err == nil && view.self.ID != r.local.Load() {
		err = fmt.Errorf("the local member %s is not registered yet", etcd.IDString(view.self.ID))
	}
	r.lastLocal.Store(&syncResult{err: err})
}

func (r *Registrar) sync(ctx context.Context) error {
	view, err := r.localMember(ctx)
	r.noteLocal(view, err)
	var changed identityError
	switch {
	case errors.As(err, &changed):
		r.warnIdentity(ctx, nil, changed)
		return err
	case err != nil:
		// A member removed on request shuts its etcd down, so whether to run the on-removed
		// command is decided without it.
		return errors.Join(err, r.afterRemoval(ctx, err))
	}
	self := view.self
	adv := r.advertise(ctx, view)
	name := r.Name
	if name == "" {
		name = self.Name
	}
	objName := naming.ObjectName(name)
	if objName == "" {
		return errors.New("the local member has no name yet; pass --name")
	}
	// The object is read after etcd: if the leader removes the member in between, the status
	// update below conflicts on resourceVersion instead of reviving a removed member.
	obj, err := r.getOrCreate(ctx, objName, self)
	if err != nil {
		return err
	}
	r.recordAdvertisement(ctx, obj, adv)
	if beingDeleted(ctx, obj) {
		r.accept(obj.Name, view)
		return nil
	}
	if localID := etcd.IDString(self.ID); obj.Status.MemberID != "" && obj.Status.MemberID != localID {
		err = r.takeOver(ctx, obj, self, adv)
		if errors.Is(err, status.ErrNameTaken) {
			if pinned, ok := pinnedBy(obj, r.Name); ok {
				changed := identityError{object: obj.Name, endpoint: r.Endpoint, pinned: pinned, answered: self.ID}
				r.warnIdentity(ctx, obj, changed)
				return changed
			}
			// Another live member has the name; the leader gives this one an object of its own.
			obj, err = r.adopt(ctx, self, adv, err)
		}
	} else {
		err = r.refresh(ctx, obj, self, adv)
	}
	if err != nil {
		return err
	}
	r.accept(obj.Name, view)
	r.noteLocal(view, nil)
	return nil
}

// accept pins the member this sync registered, and keeps the other members' client URLs, where
// its removal can be confirmed once the local etcd is gone.
func (r *Registrar) accept(object string, view localView) {
	others := make([]etcd.Member, 0, len(view.members))
	for _, m := range view.members {
		if m.ID != view.self.ID {
			others = append(others, m)
		}
	}
	r.local.Store(view.self.ID)
	r.last = registration{object: object, id: view.self.ID, clusterID: view.clusterID, others: others}
	r.identityWarned = ""
}

// beingDeleted tells whether obj is on its way out. The registrar then leaves it alone: whoever
// holds its finalizer owns it until it is gone, and an update would race them.
func beingDeleted(ctx context.Context, obj *v1alpha1.EtcdMember) bool {
	if obj.DeletionTimestamp == nil {
		return false
	}
	logf.FromContext(ctx).V(1).Info("Leaving alone an object that is being deleted", "object", obj.Name)
	return true
}

// localMember asks the local endpoint which member it is, then finds it in the member list. An
// answer as another member than the one pinned is an identityError while the pinned one is still
// in etcd.
func (r *Registrar) localMember(ctx context.Context) (localView, error) {
	st, err := r.Etcd.Status(ctx, r.Endpoint)
	if err != nil {
		return localView{}, err
	}
	members, header, err := r.Etcd.MemberListHeader(ctx)
	if err != nil {
		return localView{}, err
	}
	if pinned := r.local.Load(); !identityHolds(pinned, st.MemberID, members) {
		return localView{}, identityError{object: r.last.object, endpoint: r.Endpoint, pinned: pinned, answered: st.MemberID}
	}
	self, ok := etcd.FindMember(members, st.MemberID)
	if !ok {
		return localView{}, notMemberError{id: st.MemberID}
	}
	return localView{self: self, members: members, clusterID: header.ClusterID}, nil
}

func (r *Registrar) get(ctx context.Context, name string, obj *v1alpha1.EtcdMember) error {
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	return r.Reader.Get(ctx, types.NamespacedName{Name: name}, obj)
}

func (r *Registrar) getOrCreate(ctx context.Context, objName string, self etcd.Member) (*v1alpha1.EtcdMember, error) {
	obj := &v1alpha1.EtcdMember{}
	err := r.get(ctx, objName, obj)
	switch {
	case apierrors.IsNotFound(err):
		// The leader may have discovered the member under another name before the agent ran
		// (it started nameless, or shared a name): every member has exactly one object.
		if own, ferr := r.findByMemberID(ctx, self.ID); ferr != nil || own != nil {
			return own, ferr
		}
		return r.create(ctx, objName, self)
	case err != nil:
		return nil, fmt.Errorf("reading EtcdMember %s: %w", objName, err)
	}
	return obj, nil
}

// findByMemberID returns the object that records the member, or nil. It lists every object, so
// it is only used when the object by name is missing or belongs to another member.
func (r *Registrar) findByMemberID(ctx context.Context, id uint64) (*v1alpha1.EtcdMember, error) {
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	var list v1alpha1.EtcdMemberList
	if err := r.Reader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing EtcdMembers: %w", err)
	}
	return list.FindByMemberID(etcd.IDString(id)), nil
}

// adopt refreshes the object the leader discovered for the local member when its own name is
// taken by another live member, or returns why it cannot yet.
func (r *Registrar) adopt(ctx context.Context, self etcd.Member, adv advertisement, nameTaken error) (*v1alpha1.EtcdMember, error) {
	own, err := r.findByMemberID(ctx, self.ID)
	switch {
	case err != nil:
		return nil, err
	case own == nil:
		return nil, nameTaken
	case beingDeleted(ctx, own):
		return own, nil
	}
	return own, r.refresh(ctx, own, self, adv)
}

func (r *Registrar) create(ctx context.Context, objName string, self etcd.Member) (*v1alpha1.EtcdMember, error) {
	obj := &v1alpha1.EtcdMember{ObjectMeta: metav1.ObjectMeta{Name: objName}}
	logf.FromContext(ctx).Info("Registering local member", "object", objName, "memberID", etcd.IDString(self.ID))
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	if err := r.Client.Create(ctx, obj); err != nil {
		return nil, fmt.Errorf("creating EtcdMember %s: %w", objName, err)
	}
	return obj, nil
}

// refresh binds an object that records no member yet to the local member, and keeps the agent's
// own field, status.advertisedPeerURLs, up to date. It never touches spec.leave: a pending leave
// for this very member must survive any agent restart.
//
// Once an object records this member, everything else in its status is the leader's: what etcd's
// member list says of the member (peer and client URLs, learner or voter, its name), its health
// and its conditions. The agent's own view of the member list may be older than the leader's (a
// promotion, a peer URL update the leader just made and recorded); writing it would undo the
// leader's record until the next reconcile. A conflict is met by reading the object again and
// re-applying, which also sees a removal the leader recorded meanwhile.
func (r *Registrar) refresh(ctx context.Context, obj *v1alpha1.EtcdMember, self etcd.Member, adv advertisement) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := r.refreshOnce(ctx, obj, self, adv)
		if apierrors.IsConflict(err) {
			if getErr := r.get(ctx, obj.Name, obj); getErr != nil {
				return errors.Join(err, getErr)
			}
		}
		return err
	})
}

func (r *Registrar) refreshOnce(ctx context.Context, obj *v1alpha1.EtcdMember, self etcd.Member, adv advertisement) error {
	if status.HasReason(obj, v1alpha1.ConditionJoined, v1alpha1.ReasonRemoved) ||
		status.HasReason(obj, v1alpha1.ConditionJoined, v1alpha1.ReasonEvicted) {
		// The leader removed this member; etcd here has not noticed yet.
		return nil
	}
	before := obj.DeepCopy()
	if obj.Status.MemberID == "" {
		// The binding: the object is new, or was created empty by an earlier sync that stopped.
		status.Observe(obj, self)
	}
	r.publish(obj, adv)
	if equality.Semantic.DeepEqual(before.Status, obj.Status) {
		return nil
	}
	return r.writeStatus(ctx, obj)
}

// publish writes the agent's own fields of status: the verified peer URLs and the Node name.
func (r *Registrar) publish(obj *v1alpha1.EtcdMember, adv advertisement) {
	adv.apply(obj)
	obj.Status.NodeName = r.NodeName
}

// takeOver adopts an object that records another member ID, with the agent's own status fields.
func (r *Registrar) takeOver(ctx context.Context, obj *v1alpha1.EtcdMember, self etcd.Member, adv advertisement) error {
	members, err := r.Etcd.MemberList(ctx)
	if err != nil {
		return err
	}
	msg, err := status.TakeOver(ctx, r.Client, r.Reader, obj, self, members, func(o *v1alpha1.EtcdMember) { r.publish(o, adv) })
	if err != nil || msg == "" {
		return err
	}
	r.Events.Normal(ctx, obj, v1alpha1.ReasonRejoined, "Register", msg)
	return nil
}

func (r *Registrar) writeStatus(ctx context.Context, obj *v1alpha1.EtcdMember) error {
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	if err := r.Client.Status().Update(ctx, obj); err != nil {
		return fmt.Errorf("writing status of %s: %w", obj.Name, err)
	}
	return nil
}
