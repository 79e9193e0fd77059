package printers

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/members"
)

// memberHeader is the list table's columns; wideHeader is what -o wide adds before NOTE.
var (
	memberHeader = []string{"NAME", "MEMBER ID", "PEER URLS", "ROLE", "JOINED", "HEALTHY", "LEAVE", "AGE"}
	wideHeader   = []string{"CLIENT URLS", "RAFT TERM", "RAFT INDEX", "DB SIZE", "VERSION", "LAST PROBE", "NODE"}
)

// MemberTable lays out list rows: "-" where a value does not apply or is unknown. NOTE, the last
// column, is the only one whose cells have spaces, and appears only when a row has a note.
func MemberTable(rows []members.Row, wide bool, now time.Time) Table {
	t := Table{Header: append([]string{}, memberHeader...)}
	if wide {
		t.Header = append(t.Header, wideHeader...)
	}
	withNote := false
	for _, r := range rows {
		withNote = withNote || len(r.Notes) > 0
	}
	if withNote {
		t.Header = append(t.Header, "NOTE")
	}
	for _, r := range rows {
		cells := []string{
			dash(r.Name, "<none>"),
			dash(r.MemberID, "-"),
			dash(strings.Join(r.PeerURLs, ","), "-"),
			dash(r.Role, "-"),
			dash(r.Joined, "-"),
			dash(r.Healthy, "-"),
			dash(r.Leave, "-"),
			age(r, now),
		}
		if wide {
			cells = append(cells,
				dash(strings.Join(r.ClientURLs, ","), "-"),
				optional(r.RaftTerm, func(v uint64) string { return strconv.FormatUint(v, 10) }),
				optional(r.RaftIndex, func(v uint64) string { return strconv.FormatUint(v, 10) }),
				optional(r.DBSize, HumanBytes),
				dash(r.Version, "-"),
				lastProbe(r, now),
				dash(r.Node, "-"),
			)
		}
		if withNote {
			cells = append(cells, strings.Join(r.Notes, "; "))
		}
		t.Rows = append(t.Rows, cells)
	}
	return t
}

// PlanTable lays out a prune-stale plan.
func PlanTable(plan []members.Candidate) Table {
	t := Table{Header: []string{"NAME", "MEMBER ID", "PEER URLS", "WHY STALE", "ACTION"}}
	for _, c := range plan {
		t.Rows = append(t.Rows, []string{
			dash(c.Name, "<none>"), dash(c.MemberID, "-"), dash(strings.Join(c.PeerURLs, ","), "-"), c.Why, c.ActionText(),
		})
	}
	return t
}

func age(r members.Row, now time.Time) string {
	if r.Created == nil || r.Created.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(r.Created.Time))
}

func lastProbe(r members.Row, now time.Time) string {
	if r.LastProbe == nil || r.LastProbe.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(r.LastProbe.Time)) + " ago"
}

// ObjectName is how -o name prints an object, as kubectl does for a resource with a group.
func ObjectName(name string) string {
	return "etcdmember." + v1alpha1.GroupVersion.Group + "/" + name
}

func dash(s, missing string) string {
	if s == "" {
		return missing
	}
	return s
}

func optional[T any](v *T, format func(T) string) string {
	if v == nil {
		return "-"
	}
	return format(*v)
}

// HumanBytes prints binary units without a space, keeping the cell one word.
func HumanBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%dB", n)
	}
	return fmt.Sprintf("%.1f%s", v, units[i])
}
