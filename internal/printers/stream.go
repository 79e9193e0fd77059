package printers

import (
	"io"
	"strings"

	"github.com/olekukonko/tablewriter/pkg/twwidth"
)

// Stream prints a table and then more rows of it as they come (list -w), each row aligned with
// the header above it. Every table written alone would size its columns to its own cells, so a
// watch's rows drifted away from the list's header. A Stream keeps the widest cell seen per
// column; a row that needs a column wider than that widens it, and the header is printed again
// first (unless headers are off), because no width chosen up front fits every later name, URL or
// note, and cutting a cell would hide the change it reports.
type Stream struct {
	w         io.Writer
	noHeaders bool
	header    []string
	widths    []int
	started   bool
}

// NewStream prints to w; noHeaders leaves every header line out, as kubectl's --no-headers.
func NewStream(w io.Writer, noHeaders bool) *Stream {
	return &Stream{w: w, noHeaders: noHeaders}
}

// Write prints t's rows at the stream's widths; the first call, and any that widens a column or
// brings a column the header lacked (a NOTE), print the header before them.
func (s *Stream) Write(t Table) error {
	changed := s.fit(t)
	header := !s.noHeaders && (!s.started || changed)
	s.started = true
	out := Table{Header: s.pad(s.header)}
	for _, r := range t.Rows {
		out.Rows = append(out.Rows, s.pad(r))
	}
	return out.write(s.w, !header, false)
}

// fit widens the stream's columns to t's header and cells, and reports whether it had to after
// the first call.
func (s *Stream) fit(t Table) bool {
	changed := false
	if len(t.Header) > len(s.header) {
		s.header = append([]string{}, t.Header...)
		changed = true
	}
	for len(s.widths) < len(s.header) {
		s.widths = append(s.widths, 0)
	}
	grow := func(cells []string) {
		for i, c := range cells {
			if i < len(s.widths) && twwidth.Width(c) > s.widths[i] {
				s.widths[i] = twwidth.Width(c)
				changed = true
			}
		}
	}
	grow(s.header)
	for _, r := range t.Rows {
		grow(r)
	}
	return changed && s.started
}

// pad fills cells out to the stream's widths, with empty cells for the columns a row lacks.
func (s *Stream) pad(cells []string) []string {
	out := make([]string, len(s.widths))
	for i := range out {
		c := ""
		if i < len(cells) {
			c = cells[i]
		}
		out[i] = c + strings.Repeat(" ", s.widths[i]-twwidth.Width(c))
	}
	return out
}
