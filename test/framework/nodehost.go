package framework

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The node tier runs kubelets on the machine that also runs CI and the next session, so whatever a
// kubelet changes outside the tier's own namespaces is recorded before and put back after, on
// failure too, and after a run that was killed (the next run, or `make node-clean`, finds the
// record). Inside the tier's network and mount namespaces nothing needs restoring: firewall rules,
// net.* sysctls, routes and mounts go with the namespaces (RunInNodeNamespace).

// nodeStateDir holds the record of a run in progress and the lock that serializes runs.
const nodeStateDir = "/var/tmp/etcdmember-node"

// nodeCgroupPrefix names the cgroup under which each run's kubelets put their pods (cgroupRoot),
// in every hierarchy: what the run adds there is removed by name.
const nodeCgroupPrefix = "etcdmember-node-"

// kernelTunables are the sysctls outside any network namespace that a kubelet sets at start
// (pkg/kubelet/cm setupKernelTunables, with protectKernelDefaults off).
var kernelTunables = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// kubeletHostPaths are written by a kubelet, containerd or the CNI plugins where no flag moves
// them. The tier's mount namespace overlays /etc, /var and /run, so none may appear on the host.
// /usr is not overlaid: the flex-volume directory that a kubelet and kube-controller-manager
// create by default is there, and the tier moves both; it is watched in case a default slips back.
var kubeletHostPaths = []string{
	"/etc/kubernetes", "/etc/cni", "/etc/containerd", "/opt/cni",
	"/var/lib/kubelet", "/var/lib/cni", "/var/lib/containerd", "/var/log/containers", "/var/log/pods",
	"/run/containerd", "/run/netns", "/run/etcdmember-node", "/usr/libexec/kubernetes",
}

// HostState is what the node tier may change on the host, as read before a run.
type HostState struct {
	Sysctls map[string]string `json:"sysctls"`
	// Cgroups are the top-level directories of each cgroup hierarchy (by mount point).
	Cgroups map[string][]string `json:"cgroups"`
	// Paths are the kubeletHostPaths that exist.
	Paths []string `json:"paths"`
	// Firewall is the host network namespace's nftables ruleset.
	Firewall string `json:"firewall"`
}

// ReadHostState reads the host's state as the node tier could change it.
func ReadHostState() (*HostState, error) {
	s := &HostState{Sysctls: map[string]string{}, Cgroups: map[string][]string{}}
	for _, k := range kernelTunables {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return nil, fmt.Errorf("sysctl %s: %w", k, err)
		}
		s.Sysctls[k] = strings.TrimSpace(string(v))
	}
	roots, err := cgroupRoots()
	if err != nil {
		return nil, err
	}
	for _, root := range roots {
		entries, err := os.ReadDir(root)
		if err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", root, err)
		}
		var dirs []string
		for _, e := range entries {
			if e.IsDir() {
				dirs = append(dirs, e.Name())
			}
		}
		s.Cgroups[root] = dirs
	}
	for _, p := range kubeletHostPaths {
		if _, err := os.Lstat(p); err == nil {
			s.Paths = append(s.Paths, p)
		}
	}
	// nft is a package the node tier installs (make node-packages); the ruleset must be readable.
	out, err := exec.Command("nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("nft list ruleset: %w: %s", err, out)
	}
	s.Firewall = string(out)
	return s, nil
}

// Diff lists every way now differs from s, in words; empty when the host is as s found it.
func (s *HostState) Diff(now *HostState) []string {
	var diffs []string
	for _, k := range kernelTunables {
		if s.Sysctls[k] != now.Sysctls[k] {
			diffs = append(diffs, fmt.Sprintf("sysctl %s is %s, was %s", k, now.Sysctls[k], s.Sysctls[k]))
		}
	}
	for root, dirs := range now.Cgroups {
		for _, d := range dirs {
			if !slices.Contains(s.Cgroups[root], d) {
				diffs = append(diffs, fmt.Sprintf("cgroup %s/%s was added", root, d))
			}
		}
	}
	for _, p := range now.Paths {
		if !slices.Contains(s.Paths, p) {
			diffs = append(diffs, "path "+p+" was created")
		}
	}
	if s.Firewall != now.Firewall {
		diffs = append(diffs, "the host's nftables ruleset changed:\n"+now.Firewall)
	}
	return diffs
}

// hostRecord is the record of a run in progress: the state before it, for a later run to restore
// when this one was killed before it could.
func hostRecord() string { return filepath.Join(nodeStateDir, "host.json") }

// RestoreHost puts back what a node tier run changed, from before (the state read when it began):
// it kills every process left in the run's cgroups and the containerd shims of bin/, removes the
// cgroups the run added depth first, and writes the sysctls back. Then it checks the host against
// before and returns an error naming every difference left.
func RestoreHost(before *HostState) error {
	var errs []error
	killNodeProcesses()
	roots, err := cgroupRoots()
	if err != nil {
		return err
	}
	for _, root := range roots {
		entries, err := os.ReadDir(root)
		if err != nil {
			errs = append(errs, fmt.Errorf("cgroup %s: %w", root, err))
			continue
		}
		for _, e := range entries {
			if e.IsDir() && !slices.Contains(before.Cgroups[root], e.Name()) && ownedCgroup(e.Name()) {
				if err := removeCgroup(filepath.Join(root, e.Name())); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	for k, v := range before.Sysctls {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring sysctl %s: %w", k, err))
		}
	}
	now, err := ReadHostState()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if diffs := before.Diff(now); len(diffs) > 0 {
		errs = append(errs, fmt.Errorf("the host is not as the node tier found it:\n  %s", strings.Join(diffs, "\n  ")))
	}
	return errors.Join(errs...)
}

// ownedCgroup tells the top-level cgroups a node tier run may create: its own, and those a kubelet
// or containerd makes at the top when a setting misses (the tier's check reports any other).
func ownedCgroup(name string) bool {
	return strings.HasPrefix(name, nodeCgroupPrefix) || name == "kubepods" || name == "kubepods.slice" || name == "k8s.io"
}

// killNodeProcesses kills every process that runs a node tier binary of bin/ (containerd's shims
// outlive the run that started them: they are no children of it) or sits in one of the tier's
// cgroups (the containers), then waits until they are gone.
func killNodeProcesses() {
	bins := map[string]bool{}
	for _, name := range []string{"containerd", "containerd-shim-runc-v2", "kubelet", "kube-proxy",
		"kube-controller-manager", "kube-scheduler"} {
		bins[filepath.Join(BinDir(), name)] = true
	}
	killMatching(func(p procInfo) bool {
		exe, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(p.pid), "exe"))
		return bins[strings.TrimSuffix(exe, " (deleted)")] || inNodeCgroup(p.cgroup)
	})
}

// procInfo is what killMatching reads of a process.
type procInfo struct {
	pid             int
	cgroup, cmdline string
}

// killMatching sends SIGKILL to every process but this one that match accepts, again until none
// is left or killTimeout has passed: a process may start (a shim its container) while the others
// die.
func killMatching(match func(procInfo) bool) {
	deadline := time.Now().Add(killTimeout)
	for time.Now().Before(deadline) {
		var pids []int
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if match(procInfo{pid: pid, cgroup: string(cg), cmdline: string(cmdline)}) {
				pids = append(pids, pid)
			}
		}
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL) // gone meanwhile is as good as killed
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// inNodeCgroup tells whether a /proc/<pid>/cgroup names one of the tier's cgroups.
func inNodeCgroup(procCgroup string) bool {
	for line := range strings.SplitSeq(procCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(parts[2], "/"), "/")
		if first != "" && ownedCgroup(first) {
			return true
		}
	}
	return false
}

// CleanKilledRun takes the node tier's lock and restores the host after a killed run
// (RecoverKilledRun), reporting whether there was one: make node-clean.
func CleanKilledRun() (bool, error) {
	if err := lockNodeTier(); err != nil {
		return false, err
	}
	defer unlockNodeTier()
	if _, err := os.Stat(hostRecord()); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return true, RecoverKilledRun()
}

// RecoverKilledRun restores the host after an earlier run that left its record behind (it was
// killed before its own restore), and removes the record. No record: nothing to do. The caller
// holds the node tier's lock.
func RecoverKilledRun() error {
	data, err := os.ReadFile(hostRecord())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", hostRecord(), err)
	}
	var before HostState
	if err := json.Unmarshal(data, &before); err != nil {
		return fmt.Errorf("reading %s: %w", hostRecord(), err)
	}
	if err := RestoreHost(&before); err != nil {
		return fmt.Errorf("restoring after a killed node tier run (record %s): %w", hostRecord(), err)
	}
	// The killed run's overlay layers (RunInNodeNamespace), unused now that its processes are gone.
	layers, _ := filepath.Glob(filepath.Join(os.TempDir(), "etcdmember-node-ns-*"))
	for _, dir := range layers {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("removing a killed node tier run's %s: %w", dir, err)
		}
	}
	return os.Remove(hostRecord())
}

// recordHost writes before where a later run finds it if this one is killed.
func recordHost(before *HostState) error {
	data, err := json.Marshal(before)
	if err != nil {
		return err
	}
	return os.WriteFile(hostRecord(), data, 0o600)
}

// lockNodeTier serializes node tier runs on this machine (two restores would undo each other's
// state): it returns once this process holds the lock, which it keeps until it exits.
func lockNodeTier() error {
	if err := os.MkdirAll(nodeStateDir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(nodeStateDir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	// Held until unlockNodeTier: an unreachable *os.File is closed by its finalizer, and the lock
	// with it, in the middle of a run (seen: a second run took the lock and removed the first
	// one's record).
	nodeTierLock = f
	return nil
}

// nodeTierLock keeps the locked file open until unlockNodeTier.
var nodeTierLock *os.File

// unlockNodeTier lets the next run in, once this one has restored the host.
func unlockNodeTier() {
	if nodeTierLock != nil {
		_ = nodeTierLock.Close() // closing releases the flock; nothing was written
		nodeTierLock = nil
	}
}
