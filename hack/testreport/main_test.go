package main

import (
	"strings"
	"testing"
)

// A run of two tests: one passes, one fails and then has the framework dump a process's log.
const stream = `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestOK"}
{"Action":"output","Package":"p","Test":"TestOK","Output":"    ok_test.go:9: quiet\n"}
{"Action":"pass","Package":"p","Test":"TestOK"}
{"Action":"run","Package":"p","Test":"TestBad"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"    bad_test.go:12: asked node-3 to leave\n"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"    bad_test.go:20: node-3 not removed\n"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"        its conditions: Left=False\n"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"    process.go:49: last 150 lines of etcd:\n"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"        [etcd] a line of etcd's\n"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"--- FAIL: TestBad (1.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestBad"}
not an event
{"Action":"run","Package":"p","Test":"TestHung"}
{"Action":"output","Package":"p","Test":"TestHung","Output":"    hung_test.go:3: waiting\n"}
{"Action":"output","Package":"p","Output":"PASS\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t9.9s\n"}
{"Action":"fail","Package":"p"}
`

func TestReport(t *testing.T) {
	var out, log strings.Builder
	failures, err := report(strings.NewReader(stream), &out, &log)
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"node-3 not removed", "[etcd] a line of etcd's", "not an event\n", "FAIL\tp\t9.9s", "hung_test.go:3"} {
		if !strings.Contains(got, want) {
			t.Errorf("go test's output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "quiet") || strings.Contains(got, "PASS\n") {
		t.Errorf("a passing test's output or the PASS line printed:\n%s", got)
	}
	if !strings.Contains(log.String(), "ok_test.go:9: quiet") {
		t.Errorf("the log file lacks the passing test's output:\n%s", log.String())
	}
	if len(failures) != 2 || failures[0].test != "TestBad" || !failures[0].finished || failures[1].test != "TestHung" || failures[1].finished {
		t.Fatalf("failures %+v, want TestBad (finished) and TestHung (not)", failures)
	}

	got = summary(failures, "bin/logs/test-p.log")
	want := "\n=== 2 failed, in the tests' own words (every line: bin/logs/test-p.log)\n" +
		"FAIL TestBad (p)\n" +
		"    bad_test.go:12: asked node-3 to leave\n" +
		"    bad_test.go:20: node-3 not removed\n" +
		"        its conditions: Left=False\n" +
		"DID NOT FINISH TestHung (p)\n" +
		"    hung_test.go:3: waiting\n"
	if got != want {
		t.Errorf("summary:\n%s\nwant:\n%s", got, want)
	}
}

func TestSummaryKeepsTheLastEntries(t *testing.T) {
	var lines []string
	for i := 0; i < assertionsPerFailure+5; i++ {
		lines = append(lines, "    x_test.go:1: entry\n")
	}
	lines = append(lines, "    x_test.go:2: the failure\n")
	for i := 0; i < continuationLines+5; i++ {
		lines = append(lines, "        more\n")
	}
	entries := ownEntries(lines)
	if len(entries) != assertionsPerFailure {
		t.Fatalf("%d entries, want %d", len(entries), assertionsPerFailure)
	}
	last := entries[len(entries)-1]
	if last[0] != "    x_test.go:2: the failure\n" || len(last) != continuationLines+2 || last[len(last)-1] != "        ...\n" {
		t.Errorf("last entry %q: want the failure, %d of its lines and an ellipsis", last, continuationLines)
	}
}
