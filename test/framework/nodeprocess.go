package framework

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Process is a long-running program a tier starts for a test as a machine's init system would (a
// kubelet, for one): its log accumulates across restarts, and its last lines are printed when the
// test fails. It is killed at the cleanup of the test that started it.
type Process struct {
	p    *process
	argv []string
}

// StartProcess starts argv, its output appended to logPath.
func StartProcess(t TB, name, logPath string, argv ...string) *Process {
	t.Helper()
	p := &Process{p: newProcess(t, name, logPath), argv: argv}
	if err := p.p.start(argv[0], argv[1:]...); err != nil {
		t.Fatalf("%v", err)
	}
	return p
}

// Start starts argv in the node's namespaces (StartProcess).
func (ns *NodeNamespaces) Start(t TB, name, logPath string, argv ...string) *Process {
	t.Helper()
	return StartProcess(t, name, logPath, append(ns.Command(), argv...)...)
}

// Restart stops the process (SIGTERM, then SIGKILL after a grace period) and starts it again with
// the same command line.
func (p *Process) Restart() error {
	if err := p.p.stop(); err != nil {
		return err
	}
	return p.p.start(p.argv[0], p.argv[1:]...)
}

// Stop sends SIGTERM and waits for the exit, killing the process when it does not exit in time.
func (p *Process) Stop() error { return p.p.stop() }

// Kill sends SIGKILL and waits for the exit.
func (p *Process) Kill() error { return p.p.kill() }

// Exited says why the last run ended, or nil while it runs.
func (p *Process) Exited() error { return p.p.exited() }

// NodeCgroup makes the cgroup under which a node's kubelet runs its pods (its cgroupRoot), in
// every hierarchy, and returns its name: nothing of one node's kubelet is under another's, and the
// tier's check finds and removes whatever a run leaves.
func NodeCgroup(t TB, node string) string {
	t.Helper()
	name := nodeCgroupPrefix + strconv.Itoa(os.Getpid()) + "-" + node
	if err := makeCgroup(name); err != nil {
		t.Fatalf("node %s: %v", node, err)
	}
	return name
}

// RemoveNodeCgroup removes a NodeCgroup, deepest first, once nothing runs in it.
func RemoveNodeCgroup(name string) error {
	roots, err := cgroupRoots()
	errs := []error{err}
	for _, root := range roots {
		if _, err := os.Stat(filepath.Join(root, name)); err == nil {
			errs = append(errs, removeCgroup(filepath.Join(root, name)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cgroup %s: %w", name, err)
	}
	return nil
}
