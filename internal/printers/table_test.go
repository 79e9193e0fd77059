package printers

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// checkLayout: every line ends in a newline and has no leading or trailing blanks, and no line is
// empty.
func checkLayout(t *testing.T, out []byte) {
	t.Helper()
	if len(out) == 0 {
		return
	}
	if !bytes.HasSuffix(out, []byte("\n")) {
		t.Errorf("output does not end in a newline: %q", out)
	}
	for i, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		switch {
		case line == "":
			t.Errorf("line %d is empty", i+1)
		case strings.TrimRight(line, " \t") != line:
			t.Errorf("line %d has trailing blanks: %q", i+1, line)
		case strings.TrimLeft(line, " \t") != line:
			t.Errorf("line %d has leading blanks: %q", i+1, line)
		}
	}
}

// checkColumns: the header (if any) is printed as given, each header and cell starts its column at
// the left, and columns are three spaces apart. Widths come from the lines printed: without the
// header line, from the rows alone, as kubectl's --no-headers does. A last cell may be empty.
func checkColumns(t *testing.T, header []string, rows [][]string, out []byte) {
	t.Helper()
	lines := [][]string{}
	if header != nil {
		lines = append(lines, header)
	}
	lines = append(lines, rows...)
	printed := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(out) == 0 {
		printed = nil
	}
	if len(printed) != len(lines) {
		t.Fatalf("%d lines printed for %d:\n%s", len(printed), len(lines), out)
	}
	if len(lines) == 0 {
		return
	}
	widths := make([]int, len(lines[0]))
	for _, cells := range lines {
		for j, cell := range cells {
			widths[j] = max(widths[j], utf8.RuneCountInString(cell))
		}
	}
	starts := make([]int, len(widths))
	for j := 1; j < len(starts); j++ {
		starts[j] = starts[j-1] + widths[j-1] + 3
	}
	for i, line := range printed {
		for j, cell := range lines[i] {
			switch {
			case cell == "" && j == len(starts)-1:
				if len(line) > starts[j] {
					t.Errorf("line %d: empty last cell, yet the line goes on:\n%s", i+1, line)
				}
			case starts[j] > len(line) || !strings.HasPrefix(line[starts[j]:], cell) || j > 0 && line[starts[j]-1] != ' ':
				t.Errorf("line %d: %q does not start at column %d:\n%s", i+1, cell, starts[j], line)
			}
		}
	}
}

func TestTableLayout(t *testing.T) {
	tables := map[string]Table{
		"members":       MemberTable(noteRows, false, now),
		"members wide":  MemberTable(noteRows, true, now),
		"healthy wide":  MemberTable(healthyRows, true, now),
		"plan":          PlanTable(nil),
		"mixed case":    {Header: []string{"Name", "member ID", "x"}, Rows: [][]string{{"a", "b", "c"}, {"longer value", "-", "with spaces in it"}}},
		"one column":    {Header: []string{"NAME"}, Rows: [][]string{{"node-1"}, {"n"}}},
		"wide header":   {Header: []string{"A VERY WIDE HEADER", "B"}, Rows: [][]string{{"a", "b"}}},
		"no rows":       {Header: []string{"NAME", "MEMBER ID"}},
		"trailing cell": {Header: []string{"NAME", "NOTE"}, Rows: [][]string{{"node-1", "a; b"}, {"node-22", "c"}}},
	}
	for name, tbl := range tables {
		t.Run(name, func(t *testing.T) {
			out := writeTable(t, tbl, false)
			checkLayout(t, out)
			checkColumns(t, tbl.Header, tbl.Rows, out)
			rows := writeTable(t, tbl, true)
			checkLayout(t, rows)
			checkColumns(t, nil, tbl.Rows, rows)
		})
	}
}

func TestTableWithoutRowsOrHeaders(t *testing.T) {
	out := writeTable(t, Table{Header: []string{"NAME"}}, true)
	if len(out) != 0 {
		t.Errorf("an empty table without headers printed %q", out)
	}
}

func TestMemberTableAges(t *testing.T) {
	rows := noteRows
	tbl := MemberTable(rows, true, now)
	ageCol, probeCol := 7, 13
	want := [][2]string{{"2d1h", "12s ago"}, {"90m", "-"}, {"20d", "11m ago"}, {"3h", "15m ago"}, {"-", "-"}}
	for i, w := range want {
		if got := [2]string{tbl.Rows[i][ageCol], tbl.Rows[i][probeCol]}; got != w {
			t.Errorf("row %d: AGE, LAST PROBE = %q, want %q", i, got, w)
		}
	}
	// A later clock ages every row.
	if got := MemberTable(rows[:1], false, now.Add(24*time.Hour)).Rows[0][ageCol]; got != "3d1h" {
		t.Errorf("AGE a day later = %q, want 3d1h", got)
	}
}
