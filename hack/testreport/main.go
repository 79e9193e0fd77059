// Command testreport reads `go test -json` on stdin and prints what `go test` prints without it:
// each failed test's output and the packages' own lines. When the input ends it prints the
// failures once more, as only the tests' own lines (file_test.go:N: ...), without the logs the
// framework dumps after a failure. CI keeps the last lines of a run, and a failure's reason must be
// among them rather than above a thousand lines of etcd's and the kubelet's logs.
//
//	go test -json ./test/e2e/ | testreport bin/logs/test-e2e.log
//
// The file receives every test's output, as go test -v prints it. The exit code is go test's
// (the Makefile's shell runs with pipefail); testreport fails only when it cannot write.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// event is the part of test2json's output read here (go doc test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type testKey struct{ pkg, test string }

// failure is one failed test and the output it printed.
type failure struct {
	testKey
	finished bool
	lines    []string
}

const (
	// assertionsPerFailure and continuationLines keep the summary short enough for a CI tail:
	// the last entries a test logged before it failed, each with a few of its own lines.
	assertionsPerFailure = 12
	continuationLines    = 12
)

// ownLine is the first line of a t.Log/t.Error/t.Fatal from a test file; the framework's
// dumps come from its non-test files (process.go:49: last 150 lines of ...).
var ownLine = regexp.MustCompile(`^\s+\S+_test\.go:\d+: `)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go test -json ... | testreport LOGFILE")
		os.Exit(2)
	}
	log, err := os.Create(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "testreport: %v\n", err)
		os.Exit(1)
	}
	failures, err := report(os.Stdin, os.Stdout, log)
	if cerr := log.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testreport: %v\n", err)
		os.Exit(1)
	}
	if _, err := io.WriteString(os.Stdout, summary(failures, os.Args[1])); err != nil {
		fmt.Fprintf(os.Stderr, "testreport: %v\n", err)
		os.Exit(1)
	}
}

// report copies in's events to out as go test prints them without -json, and every output line
// to log; it returns the failed tests, in the order they ended.
func report(in io.Reader, out, log io.Writer) ([]failure, error) {
	pending := map[testKey][]string{}
	var failures []failure
	r := bufio.NewReaderSize(in, 1<<20)
	for {
		line, err := r.ReadString('\n')
		if line != "" {
			var e event
			if json.Unmarshal([]byte(line), &e) != nil {
				// go's own lines (a build error, "go: downloading") are not events.
				if _, werr := io.WriteString(out, line); werr != nil {
					return nil, werr
				}
			} else if f, werr := handle(e, pending, out, log); werr != nil {
				return nil, werr
			} else {
				failures = append(failures, f...)
			}
		}
		if errors.Is(err, io.EOF) {
			return failures, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// handle applies one event: a test's output is held until it ends, and printed if it failed; a
// package's own output is printed as it comes. A package that ends with tests still running (a
// timeout's panic) prints theirs too: they are the ones that hung.
func handle(e event, pending map[testKey][]string, out, log io.Writer) ([]failure, error) {
	k := testKey{e.Package, e.Test}
	switch e.Action {
	case "output", "build-output":
		if _, err := io.WriteString(log, e.Output); err != nil {
			return nil, err
		}
		if e.Test != "" {
			pending[k] = append(pending[k], e.Output)
			return nil, nil
		}
		// The binary's own PASS line: go test without -json does not show it either.
		if e.Output == "PASS\n" {
			return nil, nil
		}
		_, err := io.WriteString(out, e.Output)
		return nil, err
	case "pass", "skip":
		delete(pending, k)
	case "fail":
		if e.Test != "" {
			f := failure{testKey: k, finished: true, lines: pending[k]}
			delete(pending, k)
			return []failure{f}, write(out, f.lines)
		}
		var unfinished []failure
		for pk, lines := range pending {
			if pk.pkg == e.Package {
				unfinished = append(unfinished, failure{testKey: pk, lines: lines})
				delete(pending, pk)
				if err := write(out, lines); err != nil {
					return nil, err
				}
			}
		}
		return unfinished, nil
	}
	return nil, nil
}

func write(out io.Writer, lines []string) error {
	for _, l := range lines {
		if _, err := io.WriteString(out, l); err != nil {
			return err
		}
	}
	return nil
}

// summary is each failure's own last lines; empty when every test passed.
func summary(failures []failure, logPath string) string {
	if len(failures) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n=== %d failed, in the tests' own words (every line: %s)\n", len(failures), logPath)
	for _, f := range failures {
		state := "FAIL"
		if !f.finished {
			state = "DID NOT FINISH"
		}
		fmt.Fprintf(&b, "%s %s (%s)\n", state, f.test, f.pkg)
		for _, entry := range ownEntries(f.lines) {
			b.WriteString(strings.Join(entry, ""))
		}
	}
	return b.String()
}

// ownEntries are the last assertionsPerFailure entries the test logged from its own files, each
// its first line and up to continuationLines of the lines indented under it.
func ownEntries(lines []string) [][]string {
	var entries [][]string
	in := false
	for _, l := range lines {
		switch {
		case ownLine.MatchString(l):
			entries = append(entries, []string{l})
			in = true
		case in && strings.HasPrefix(l, "        "):
			last := &entries[len(entries)-1]
			if len(*last) <= continuationLines {
				*last = append(*last, l)
			} else if len(*last) == continuationLines+1 {
				*last = append(*last, "        ...\n")
			}
		default:
			in = false
		}
	}
	if len(entries) > assertionsPerFailure {
		entries = entries[len(entries)-assertionsPerFailure:]
	}
	return entries
}
