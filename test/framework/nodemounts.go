package framework

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cgroups and mounts of the node tier: where a kubelet's pods live, and what its runtime mounts.

type mountEntry struct{ target, fstype string }

// makeCgroup creates name at the top of every cgroup hierarchy: the kubelet's cgroupRoot must
// exist. A v1 cpuset cgroup starts with no CPUs and no memory nodes, so it gets its parent's.
func makeCgroup(name string) error {
	roots, err := cgroupRoots()
	if err != nil {
		return err
	}
	for _, root := range roots {
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent, err := os.ReadFile(filepath.Join(root, f))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
				return fmt.Errorf("cgroup %s/%s: %w", dir, f, err)
			}
		}
	}
	return nil
}

// unmountUnder detaches every mount at or below dir, deepest first: the kubelet bind-mounts its
// root directory and mounts the pods' volumes, containerd its snapshots.
func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("mountinfo: %w", err)
	}
	var targets []string
	for _, m := range parseMountinfo(string(data)) {
		if m.target == dir || strings.HasPrefix(m.target, dir+"/") {
			targets = append(targets, m.target)
		}
	}
	slices.SortFunc(targets, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	var errs []error
	for _, target := range targets {
		if err := syscall.Unmount(target, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", target, err))
		}
	}
	return errors.Join(errs...)
}

// cgroupRoots are the mount points of the cgroup hierarchies (v1 controllers, and v2).
func cgroupRoots() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	var roots []string
	for _, m := range parseMountinfo(string(data)) {
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			roots = append(roots, m.target)
		}
	}
	sort.Strings(roots)
	return roots, nil
}

// parseMountinfo reads /proc/<pid>/mountinfo: the mount point is field 5, the file system type
// the first field after the " - " separator.
func parseMountinfo(data string) []mountEntry {
	var mounts []mountEntry
	for line := range strings.SplitSeq(data, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		fields, postFields := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(postFields) < 1 {
			continue
		}
		mounts = append(mounts, mountEntry{target: unescapeMount(fields[4]), fstype: postFields[0]})
	}
	return mounts
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeCgroup removes a cgroup directory and everything under it, deepest first (a cgroup
// directory goes with rmdir, never with its files).
func removeCgroup(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	var errs []error
	for _, d := range slices.Backward(dirs) {
		if err := rmdirRetry(d); err != nil {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// rmdirRetry retries while the kernel still counts a just-killed task in the cgroup (EBUSY).
func rmdirRetry(dir string) error {
	var err error
	for range 50 {
		if err = syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}
