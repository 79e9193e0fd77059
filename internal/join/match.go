package join

import (
	"fmt"
	"slices"
	"strings"

	"github.com/etcdmember/kubectl-etcdmember/internal/peerurl"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// Match finds the member that already has exactly the peer URLs want (normalized), which makes a
// second run print the same settings instead of adding a second member. A member has a name only
// once it started, so an unnamed match is taken for this node's, while a match that started
// under another name belongs to another node. A member holding only some of the URLs is refused
// here, with its ID, rather than by etcd's bare "Peer URLs already exists".
func Match(members []etcd.Member, name string, want []string) (etcd.Member, bool, error) {
	for _, m := range members {
		got := normalizeRecorded(m.PeerURLs)
		switch {
		case slices.Equal(got, want):
			if m.Name != "" && m.Name != name {
				return etcd.Member{}, false, fmt.Errorf("member %s already has peer URLs %s and started as %q, not %q: "+
					"it belongs to another node; use this node's own peer URLs, or if it is this node's old record, "+
					"remove it first (etcdctl member remove %s)", etcd.IDString(m.ID), strings.Join(want, ","), m.Name, name, etcd.IDString(m.ID))
			}
			return m, true, nil
		case overlaps(got, want):
			return etcd.Member{}, false, fmt.Errorf("member %s has peer URLs %s, which overlap %s: "+
				"etcd allows each peer URL to one member only", describe(m), strings.Join(m.PeerURLs, ","), strings.Join(want, ","))
		}
	}
	return etcd.Member{}, false, nil
}

// namesakes returns the members other than self that started under name. etcd allows that, but
// it usually means the old record of a rebuilt node that nobody removed, still counted in quorum.
func namesakes(members []etcd.Member, self uint64, name string) []etcd.Member {
	var out []etcd.Member
	for _, m := range members {
		if m.ID != self && m.Name == name {
			out = append(out, m)
		}
	}
	return out
}

// describe names a member for messages: its ID, its name or that it never started, and whether
// it votes.
func describe(m etcd.Member) string {
	name := "not started"
	if m.Name != "" {
		name = fmt.Sprintf("%q", m.Name)
	}
	role := "voter"
	if m.IsLearner {
		role = "learner"
	}
	return fmt.Sprintf("%s (%s, %s)", etcd.IDString(m.ID), name, role)
}

// normalizeRecorded brings etcd's record into NormalizePeerURLs' spelling where it can; a URL it
// cannot normalize (added by another tool) stays as recorded and simply matches nothing.
func normalizeRecorded(urls []string) []string {
	out := make([]string, 0, len(urls))
	for _, u := range urls {
		if n, err := peerurl.Normalize(u); err == nil {
			u = n
		}
		out = append(out, u)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func overlaps(a, b []string) bool {
	return slices.ContainsFunc(a, func(u string) bool { return slices.Contains(b, u) })
}
