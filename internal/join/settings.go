package join

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// Var is one line of the environment file.
type Var struct {
	Key, Value string
}

// Settings renders what the member with ID self needs to start as name and join the cluster that
// members describes. The peer URLs come from etcd's record, which is what the other members will
// compare them with.
func Settings(members []etcd.Member, self uint64, name string) ([]Var, error) {
	i := slices.IndexFunc(members, func(m etcd.Member) bool { return m.ID == self })
	if i < 0 {
		return nil, fmt.Errorf("member %s is not in the member list", etcd.IDString(self))
	}
	initial, err := initialCluster(members, self, name)
	if err != nil {
		return nil, err
	}
	return []Var{
		{"ETCD_NAME", name},
		{"ETCD_INITIAL_CLUSTER", initial},
		{"ETCD_INITIAL_CLUSTER_STATE", "existing"},
		{"ETCD_INITIAL_ADVERTISE_PEER_URLS", strings.Join(members[i].PeerURLs, ",")},
	}, nil
}

// initialCluster lists every peer URL as name=URL, members sorted by ID so that a second run
// prints the same text.
func initialCluster(members []etcd.Member, self uint64, name string) (string, error) {
	members = slices.SortedFunc(slices.Values(members), func(a, b etcd.Member) int { return cmp.Compare(a.ID, b.ID) })
	names := map[string]int{}
	ids := map[string]bool{}
	for _, m := range members {
		names[m.Name]++
		ids[etcd.IDString(m.ID)] = true
	}
	listed := map[string]uint64{}
	var entries []string
	for _, m := range members {
		key := entryName(m, self, name, names, ids)
		if other, dup := listed[key]; dup {
			return "", fmt.Errorf("members %s and %s would both be listed as %q in ETCD_INITIAL_CLUSTER; choose another name",
				etcd.IDString(other), etcd.IDString(m.ID), key)
		}
		listed[key] = m.ID
		for _, u := range m.PeerURLs {
			if u == "" || !utf8.ValidString(u) || strings.Contains(u, ",") || strings.IndexFunc(u, unicode.IsControl) >= 0 {
				return "", fmt.Errorf("member %s has peer URL %q, which ETCD_INITIAL_CLUSTER cannot carry (etcd splits it at commas, and the file holds one line per setting); correct the member's record with etcdctl member update",
					etcd.IDString(m.ID), u)
			}
			entries = append(entries, key+"="+u)
		}
	}
	return strings.Join(entries, ","), nil
}

// entryName is the name a member is listed under. A joining etcd matches the other members by
// peer URLs only and groups the URLs by name, so any name will do as long as each member has its
// own: an empty name (never started), a shared one, the joining member's or one etcd cannot parse
// back would merge members, so those are listed under their ID instead.
func entryName(m etcd.Member, self uint64, name string, names map[string]int, ids map[string]bool) string {
	switch {
	case m.ID == self:
		return name
	case m.Name == "", m.Name == name, names[m.Name] > 1, ids[m.Name], CheckName(m.Name) != nil:
		return etcd.IDString(m.ID)
	}
	return m.Name
}

// Format writes one KEY=value line per variable, in the part of the syntax that systemd's
// EnvironmentFile= and a POSIX shell ("set -a; . FILE") read alike.
func Format(vars []Var) string {
	var b strings.Builder
	for _, v := range vars {
		b.WriteString(v.Key + "=" + quote(v.Value) + "\n")
	}
	return b.String()
}

// quote leaves a value bare when no character in it means anything to either reader, and
// otherwise double-quotes it, escaping the four characters that stay special inside double quotes
// for both. A tilde stays quoted: a shell expands it even in the middle of an assignment.
func quote(v string) string {
	if v != "" && strings.IndexFunc(v, needsQuotes) < 0 {
		return v
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range v {
		if strings.ContainsRune(`\"$`+"`", r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}

// needsQuotes: letters, digits and the punctuation of names and URLs stay bare, the rest is
// quoted, so that the file reads the same in a shell and as a systemd EnvironmentFile.
func needsQuotes(r rune) bool {
	plain := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._@%+=:,/", r)
	return !plain
}
