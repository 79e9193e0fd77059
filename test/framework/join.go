package framework

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// The settings "etcdmember join" writes, which StartWithSettings takes instead of computing its
// own.
const (
	envName              = "ETCD_NAME"
	envInitialCluster    = "ETCD_INITIAL_CLUSTER"
	envClusterState      = "ETCD_INITIAL_CLUSTER_STATE"
	envAdvertisePeerURLs = "ETCD_INITIAL_ADVERTISE_PEER_URLS"
)

// sourceTimeout bounds the shell that reads an environment file, which only a hung machine makes
// take longer than milliseconds.
const sourceTimeout = 10 * time.Second

// NewPendingMember prepares a member that the code under test adds to etcd, such as "etcdmember
// join": its address (the peer URL is that MemberAdd's argument), directory and, with TLS,
// certificate. No process runs and etcd knows nothing of it; it is no part of Members() until
// StartWithSettings started it.
func (c *Cluster) NewPendingMember(t TB, name string) *Member {
	t.Helper()
	if c.Member(name) != nil {
		t.Fatalf("member %s already exists", name)
	}
	m := c.newMember(t, name)
	// newMember registers every member it makes, since its other callers start the member
	// right away; the process's cleanup stays registered with the test either way.
	c.mu.Lock()
	c.members = slices.DeleteFunc(c.members, func(mm *Member) bool { return mm == m })
	c.mu.Unlock()
	return m
}

// StartWithSettings starts a member from NewPendingMember with the flags every member gets,
// except that --name, --initial-cluster, --initial-cluster-state and --initial-advertise-peer-urls
// come from env, the settings "etcdmember join" wrote (ReadEnvFile). It waits until the member
// serves and follows a leader, records its ID, and adds it to Members(). The advertised peer
// URLs must be the member's own: anything else could never work, so it fails the test.
func (m *Member) StartWithSettings(t TB, env map[string]string) {
	t.Helper()
	if m.c.Member(m.Name) != nil {
		t.Fatalf("member %s has started before; restart it with Start", m.Name)
	}
	if err := m.applySettings(env); err != nil {
		t.Fatalf("settings for member %s: %v", m.Name, err)
	}
	m.launch(t, m.c.etcd(t))
	m.waitServing(t, true)
	m.c.mu.Lock()
	m.c.members = append(m.c.members, m)
	m.c.mu.Unlock()
}

// applySettings refuses settings it would not pass on in full, so that a setting join adds later
// cannot be dropped here unnoticed.
func (m *Member) applySettings(env map[string]string) error {
	for key := range env {
		if !slices.Contains([]string{envName, envInitialCluster, envClusterState, envAdvertisePeerURLs}, key) {
			return fmt.Errorf("unknown setting %s", key)
		}
	}
	for _, key := range []string{envName, envInitialCluster, envClusterState} {
		if env[key] == "" {
			return fmt.Errorf("%s is missing", key)
		}
	}
	if got := env[envAdvertisePeerURLs]; got != m.PeerURL() {
		return fmt.Errorf("%s is %q, but the member listens on %s", envAdvertisePeerURLs, got, m.PeerURL())
	}
	m.etcdName = env[envName]
	m.mu.Lock()
	m.initialCluster, m.clusterState = env[envInitialCluster], env[envClusterState]
	m.mu.Unlock()
	return nil
}

// ReadEnvFile reads an environment file the way "set -a; . FILE" does, with /bin/sh in an
// otherwise empty environment, and returns the ETCD_ variables it sets.
func ReadEnvFile(t TB, path string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sourceTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", `set -a && . "$1" && exec env -0`, "sh", path)
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sourcing %s: %v", path, err)
	}
	env := map[string]string{}
	for kv := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if key, value, _ := strings.Cut(kv, "="); strings.HasPrefix(key, "ETCD_") {
			env[key] = value
		}
	}
	return env
}
