// Package printers prints the plugin's output the way kubectl does: borderless tables with
// left-aligned upper-case headers and three spaces between columns, and every other -o format
// through k8s.io/cli-runtime's printers.
package printers

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// Table is a header and rows of cells, printed as kubectl prints `get` output.
type Table struct {
	Header []string
	Rows   [][]string
}

// Write prints the table; noHeaders leaves the header line out, for scripts. A watch's rows go
// through a Stream instead, which keeps them under the header.
func (t Table) Write(w io.Writer, noHeaders bool) error {
	return t.write(w, noHeaders, true)
}

// write lays the table out; trim off keeps the blanks a Stream pads its cells with.
func (t Table) write(w io.Writer, noHeaders, trim bool) error {
	var buf bytes.Buffer
	trimSpace := tw.Off
	if trim {
		trimSpace = tw.On
	}
	tbl := tablewriter.NewTable(&buf,
		tablewriter.WithTrimSpace(trimSpace),
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Borders:  tw.BorderNone,
			Settings: tw.Settings{Separators: tw.SeparatorsNone, Lines: tw.LinesNone},
		})),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
		tablewriter.WithRowAlignment(tw.AlignLeft),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithPadding(tw.Padding{Left: tw.Empty, Right: "   ", Overwrite: true}),
	)
	if !noHeaders {
		tbl.Header(t.Header)
	}
	if err := tbl.Bulk(t.Rows); err != nil {
		return fmt.Errorf("laying out the table: %w", err)
	}
	if err := tbl.Render(); err != nil {
		return fmt.Errorf("laying out the table: %w", err)
	}
	// Padding after the last column only gets in the way of diffs and copy-paste.
	var out strings.Builder
	for line := range strings.Lines(buf.String()) {
		out.WriteString(strings.TrimRight(line, " \n") + "\n")
	}
	_, err := io.WriteString(w, out.String())
	return err
}
