package printers

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/internal/members"
)

// watchRows are what a watch prints after the list of healthyRows, one event each: a row that
// fits, a longer name and peer URL, and a note (a column the list's header did not have).
var watchRows = []members.Row{
	{Name: "node-1", MemberID: "8e9e05c52164694d", PeerURLs: []string{"https://10.0.0.1:2380"}, Role: members.RoleLeader,
		Joined: "True", Healthy: "True", Created: ago(49 * time.Hour)},
	{Name: "controller-with-a-long-name", MemberID: "5a", PeerURLs: []string{"https://[fd00:1234:5678::10]:2380"},
		Role: members.RoleLearner, Joined: "False", Healthy: "-", Created: ago(time.Second)},
	{Name: "node-2", MemberID: "91bc3c398fb3c146", PeerURLs: []string{"https://10.0.0.2:2380"}, Role: members.RoleVoter,
		Joined: "True", Healthy: "False", Leave: members.LeaveRequested, Created: ago(90 * time.Minute),
		Notes: []string{"unhealthy for 2m"}},
}

// streamed prints healthyRows as the list does and then each of watchRows as list -w does.
func streamed(t *testing.T, wide, noHeaders bool) ([]byte, [][]string, [][]string) {
	t.Helper()
	var out bytes.Buffer
	s := NewStream(&out, noHeaders)
	first := MemberTable(healthyRows, wide, now)
	if err := s.Write(first); err != nil {
		t.Fatal(err)
	}
	headers, rows := [][]string{first.Header}, first.Rows
	for _, r := range watchRows {
		tbl := MemberTable([]members.Row{r}, wide, now)
		if err := s.Write(tbl); err != nil {
			t.Fatal(err)
		}
		headers, rows = append(headers, tbl.Header), append(rows, tbl.Rows...)
	}
	return out.Bytes(), headers, rows
}

// TestStreamKeepsColumnsUnderTheHeader: every row list -w prints starts each cell where the
// header line above it starts that column, with rows wider than the list's; the header is printed
// again only when a row widened a column or brought one, and never under --no-headers.
func TestStreamKeepsColumnsUnderTheHeader(t *testing.T) {
	for _, wide := range []bool{false, true} {
		out, _, rows := streamed(t, wide, false)
		checkLayout(t, out)
		name := "stream"
		if wide {
			name += "-wide"
		}
		golden(t, name, out)

		var header []int
		headers, printed := 0, 0
		for i, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
			if strings.HasPrefix(line, "NAME ") {
				header = columnStarts(line)
				headers++
				continue
			}
			if header == nil {
				t.Fatalf("line %d comes before any header:\n%s", i+1, out)
			}
			cells := rows[printed]
			printed++
			for j, cell := range cells {
				if cell == "" {
					continue
				}
				if j >= len(header) || !strings.HasPrefix(line[min(header[j], len(line)):], cell) {
					t.Errorf("wide=%v line %d: %q is not under its header column %d:\n%s", wide, i+1, cell, j, out)
				}
			}
		}
		if printed != len(rows) {
			t.Errorf("wide=%v: %d rows printed, want %d", wide, printed, len(rows))
		}
		// The list's header, again before the wider name, and again before the NOTE column.
		if headers != 3 {
			t.Errorf("wide=%v: %d header lines, want 3 (the list's, the wider row's, the note's):\n%s", wide, headers, out)
		}
	}

	out, _, rows := streamed(t, false, true)
	if strings.Contains(string(out), "NAME ") {
		t.Errorf("--no-headers printed a header:\n%s", out)
	}
	if n := strings.Count(string(out), "\n"); n != len(rows) {
		t.Errorf("--no-headers: %d lines for %d rows", n, len(rows))
	}
	golden(t, "stream-no-headers", out)
}

// columnStarts is where each header of a line starts: headers are upper case words with single
// spaces inside (MEMBER ID) and three or more spaces between them.
func columnStarts(line string) []int {
	starts := []int{0}
	for i := 1; i < len(line); i++ {
		if line[i] != ' ' && strings.HasSuffix(line[:i], "   ") {
			starts = append(starts, i)
		}
	}
	return starts
}
