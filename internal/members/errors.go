package members

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

// RefusedError is a leave the controller will not carry out as things stand: the quorum guard
// refused it (QuorumAtRisk, LastVoter), or nobody can act on it (NoOtherAgent, NoMemberID). The
// request stays in place and the controller re-checks it by itself.
type RefusedError struct {
	Name    string
	Reason  string
	Message string
	// DryRun marks the leader's pre-flight verdict: nothing was asked.
	DryRun bool
}

func (e *RefusedError) Error() string {
	msg := strings.TrimRight(e.Message, ". ")
	if e.DryRun {
		return fmt.Sprintf("%s is not removable now (Removable=False %s): %s (client dry run: nothing changed)", e.Name, e.Reason, msg)
	}
	if e.QuorumGuard() {
		return fmt.Sprintf("leave of %s refused by the quorum guard (%s): %s. The request stays pending and completes "+
			"by itself once the cluster is healthy enough; cancel it with: kubectl etcdmember leave %s --cancel",
			e.Name, e.Reason, msg, e.Name)
	}
	return fmt.Sprintf("leave of %s cannot proceed (%s): %s. The request stays pending; cancel it with: "+
		"kubectl etcdmember leave %s --cancel", e.Name, e.Reason, msg, e.Name)
}

// QuorumGuard tells a refusal that protects quorum from one that waits for an agent or a record.
func (e *RefusedError) QuorumGuard() bool {
	return e.Reason == v1alpha1.ReasonQuorumAtRisk || e.Reason == v1alpha1.ReasonLastVoter
}

// TimeoutError is a wait that ran out of time; Last is the last state seen.
type TimeoutError struct {
	What string
	Last string
	// APIError is the last API error met while waiting, if any.
	APIError error
}

func (e *TimeoutError) Error() string {
	msg := fmt.Sprintf("timed out %s; last state: %s", e.What, e.Last)
	if e.APIError != nil {
		msg += fmt.Sprintf(" (last API error: %v)", e.APIError)
	}
	return msg
}

// NotInstalledError is an API server that serves no EtcdMembers: the CRD is not installed there.
// Discovery's own words ("no matches for etcdmember.io/v1alpha1") name the cause, not the fix.
type NotInstalledError struct{ Err error }

func (e *NotInstalledError) Error() string {
	return "the EtcdMember CRD (" + Resource + ") is not installed in this cluster; install it with: kubectl apply -k config/default"
}

func (e *NotInstalledError) Unwrap() error { return e.Err }

// NotInstalled returns a *NotInstalledError when err is the REST mapper finding no resource or
// kind of the etcdmember.io group, nil otherwise.
func NotInstalled(err error) *NotInstalledError {
	var resource *meta.NoResourceMatchError
	var kind *meta.NoKindMatchError
	if (errors.As(err, &resource) && resource.PartialResource.Group == v1alpha1.GroupVersion.Group) ||
		(errors.As(err, &kind) && kind.GroupKind.Group == v1alpha1.GroupVersion.Group) {
		return &NotInstalledError{Err: err}
	}
	return nil
}
