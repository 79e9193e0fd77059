//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// armed is read once, at start: the environment of a running agent does not change, and a
// malformed value stops every command of the test build at once.
var armed = parse(os.Getenv(EnvVar))

type action struct {
	point string
	block time.Duration
	// fired: a block happens once, so that the change after it runs unhindered. Atomic: the
	// node controller reconciles several Nodes at once.
	fired atomic.Bool
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

// Hit exits the process or blocks when name is the armed failpoint.
func Hit(name string) {
	if armed == nil || armed.point != name {
		return
	}
	if armed.block == 0 {
		os.Exit(ExitCode)
	}
	if armed.fired.Swap(true) {
		return
	}
	fmt.Fprintf(os.Stderr, "%s %s for %s\n", BlockingMarker, name, armed.block)
	time.Sleep(armed.block)
}
