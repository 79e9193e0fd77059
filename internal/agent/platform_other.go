//go:build !unix

package agent

import (
	"fmt"
	"os/exec"
	"runtime"
)

// supported tells whether the node agent runs on this OS: etcd nodes run Linux, and the agent's
// --on-removed-exec relies on Unix process groups. The plugin's other commands run anywhere.
func supported() error {
	return fmt.Errorf("the node agent (serve) runs on etcd nodes, which run Linux or another Unix; it is not supported on %s", runtime.GOOS)
}

// ownProcessGroup is never reached: Run refuses to start on this OS.
func ownProcessGroup(*exec.Cmd) {}
