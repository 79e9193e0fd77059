// Package failpoint lets the tests stop an agent at a named point inside a membership change:
// crash it there, to prove that a leader dying between two steps leaves enough behind for the
// next leader to finish the change and report it truthfully; or hold it there, to prove that a
// leader frozen past its term changes nothing when it resumes.
//
// Failpoints exist only in builds with the failpoints tag (`make build` writes one as
// bin/failpoints/kubectl-etcdmember, the agent the test framework runs). The shipped binary,
// built without the tag, compiles every Hit to nothing and never reads the environment;
// test/packaging checks that it carries none of this package's code. Even in a tagged build a
// failpoint does nothing unless the environment names it.
package failpoint

// EnvVar names the failpoint and what happens there: "<point>" exits the process;
// "<point>:block=<duration>" holds the calling goroutine that long, once, and goes on.
const EnvVar = "ETCDMEMBER_FAILPOINT"

// ExitCode is the status the process exits with at a failpoint, so tests can tell the crash they
// asked for from any other.
const ExitCode = 87

// BlockingMarker starts the line written to stderr when a block begins, so a test knows the
// goroutine is held there.
const BlockingMarker = "failpoint blocking:"

// Points inside the membership changes.
const (
	// LeaveBeforeRemove is after the quorum guard cleared a removal (and its intent was stored in
	// etcd) and before MemberRemove.
	LeaveBeforeRemove = "leave-before-remove"
	// LeaveAfterRemove is after MemberRemove succeeded and before the outcome was written.
	LeaveAfterRemove = "leave-after-remove"
	// NodeBeforeLeaveRequest is after the node controller saw a bound Node being deleted and decided
	// to ask its member to leave, and before it wrote the request.
	NodeBeforeLeaveRequest = "node-before-leave-request"
)
