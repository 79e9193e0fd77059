package framework

import (
	"strings"
	"testing"
)

func TestParseMountinfo(t *testing.T) {
	data := `36 35 98:0 / /mnt1 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
37 36 0:31 / /sys/fs/cgroup/cpu rw,nosuid shared:9 - cgroup cgroup rw,cpu
38 36 0:32 / /tmp/a\040b rw - tmpfs tmpfs rw
39 36 0:33 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
garbage`
	got := parseMountinfo(data)
	want := []mountEntry{{"/mnt1", "ext3"}, {"/sys/fs/cgroup/cpu", "cgroup"}, {"/tmp/a b", "tmpfs"}, {"/sys/fs/cgroup/unified", "cgroup2"}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

// TestHostStateDiff: every change the node tier could leave is reported, and nothing else.
func TestHostStateDiff(t *testing.T) {
	before := &HostState{
		Sysctls:  map[string]string{"vm/overcommit_memory": "0", "kernel/panic": "1"},
		Cgroups:  map[string][]string{"/sys/fs/cgroup/cpu": {"user.slice"}},
		Paths:    []string{"/etc/cni"},
		Firewall: "table inet filter {}\n",
	}
	if diffs := before.Diff(before); len(diffs) != 0 {
		t.Errorf("a state differs from itself: %v", diffs)
	}
	now := &HostState{
		Sysctls:  map[string]string{"vm/overcommit_memory": "1", "kernel/panic": "1"},
		Cgroups:  map[string][]string{"/sys/fs/cgroup/cpu": {"user.slice", "kubepods"}},
		Paths:    []string{"/etc/cni", "/var/lib/kubelet"},
		Firewall: "table inet filter {}\ntable ip kube-proxy {}\n",
	}
	diffs := strings.Join(before.Diff(now), "\n")
	for _, want := range []string{"sysctl vm/overcommit_memory is 1, was 0", "cgroup /sys/fs/cgroup/cpu/kubepods was added",
		"path /var/lib/kubelet was created", "nftables ruleset changed"} {
		if !strings.Contains(diffs, want) {
			t.Errorf("diff misses %q:\n%s", want, diffs)
		}
	}
	if strings.Contains(diffs, "kernel/panic") || strings.Contains(diffs, "user.slice") {
		t.Errorf("diff reports what did not change:\n%s", diffs)
	}
}

func TestInNodeCgroup(t *testing.T) {
	for cg, want := range map[string]bool{
		"4:memory:/process_api/abc\n1:cpu:/\n":                         false,
		"4:memory:/etcdmember-node-12-node-1/kubepods/besteffort/p1\n": true,
		"1:cpu:/kubepods/burstable\n":                                  true,
		"0::/user.slice\n":                                             false,
	} {
		if got := inNodeCgroup(cg); got != want {
			t.Errorf("inNodeCgroup(%q) = %v, want %v", cg, got, want)
		}
	}
}
