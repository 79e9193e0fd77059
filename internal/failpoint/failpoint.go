// Package failpoint lets the chaos tests crash an agent at a named point inside a membership
// change, to prove that a leader dying between two steps leaves enough behind for the next leader
// to finish the change and report it truthfully. It does nothing unless the environment names a
// point.
package failpoint

import (
	"os"
)

// EnvVar names the failpoint at which the process exits.
const EnvVar = "ETCDMEMBER_FAILPOINT"

// ExitCode is the status the process exits with at a failpoint, so tests can tell the crash they
// asked for from any other.
const ExitCode = 87

// Points inside the leave sequence.
const (
	// LeaveBeforeRemove is after the removal intent was stored in etcd and before MemberRemove.
	LeaveBeforeRemove = "leave-before-remove"
	// LeaveAfterRemove is after MemberRemove succeeded and before the outcome was written.
	LeaveAfterRemove = "leave-after-remove"
)

// armed is read once: the environment of a running agent does not change.
var armed = os.Getenv(EnvVar)

// Hit exits the process when name is the armed failpoint.
func Hit(name string) {
	if armed != "" && armed == name {
		os.Exit(ExitCode)
	}
}
