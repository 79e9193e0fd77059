// Package failpoint lets the tests stop an agent at a named point inside a membership change:
// crash it there, to prove that a leader dying between two steps leaves enough behind for the
// next leader to finish the change and report it truthfully; or hold it there, to prove that a
// leader frozen past its term changes nothing when it resumes. It does nothing unless the
// environment names a point.
package failpoint

import (
	"fmt"
	"os"
	"strings"
	"time"
)

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
)

// armed is read once: the environment of a running agent does not change.
var armed = parse(os.Getenv(EnvVar))

type action struct {
	point string
	block time.Duration
	// fired: a block happens once, so that the change after it runs unhindered.
	fired bool
}

func parse(v string) *action {
	if v == "" {
		return nil
	}
	point, arg, found := strings.Cut(v, ":")
	a := &action{point: point}
	if found {
		d, err := time.ParseDuration(strings.TrimPrefix(arg, "block="))
		if err != nil || !strings.HasPrefix(arg, "block=") {
			// A test that armed a failpoint wrongly must not pass as if the point were never hit.
			fmt.Fprintf(os.Stderr, "%s=%q: want <point> or <point>:block=<duration>\n", EnvVar, v)
			os.Exit(2)
		}
		a.block = d
	}
	return a
}

// Hit exits the process or blocks when name is the armed failpoint. Only the leave controller,
// one reconcile at a time, calls it, so fired needs no lock.
func Hit(name string) {
	if armed == nil || armed.point != name {
		return
	}
	if armed.block == 0 {
		os.Exit(ExitCode)
	}
	if armed.fired {
		return
	}
	armed.fired = true
	fmt.Fprintf(os.Stderr, "%s %s for %s\n", BlockingMarker, name, armed.block)
	time.Sleep(armed.block)
}
