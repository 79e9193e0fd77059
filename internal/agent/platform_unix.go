//go:build unix

package agent

import (
	"os/exec"
	"syscall"
)

// supported tells whether the node agent runs on this OS.
func supported() error { return nil }

// ownProcessGroup starts cmd in a process group of its own and makes its cancellation kill the
// whole group, so that whatever the command started goes with it.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
