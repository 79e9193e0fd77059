package framework

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// The slowest etcd request of a test binary, kept from every member's log before the test's
// directory goes: how loaded the machine was is the first question about a failure or a slow
// run, and the logs of passing tests are deleted. etcd logs "apply request took too long" for
// every request over its expected duration (100 ms), reads and writes alike, with what it took.
var slowest struct {
	mu     sync.Mutex
	took   time.Duration
	where  string
	record string
	// requests counts the requests over etcd's expected duration.
	requests int
}

// slowRequestMessage is what etcd logs about a request over its expected duration.
const slowRequestMessage = "apply request took too long"

// NoteSlowEtcdRequests reads the log of an etcd member that the framework did not start (a
// kubelet's container log of a static pod, each line behind the runtime's prefix) for its slow
// requests, as the framework reads its own members'.
func NoteSlowEtcdRequests(test, member, logPath string) { noteSlowRequests(test, member, logPath) }

// noteSlowRequests reads a member's log for its slow requests.
func noteSlowRequests(test, member, logPath string) {
	f, err := os.Open(logPath)
	if err != nil {
		return // a member that never started has no log
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		took, record, ok := parseSlowRequest(sc.Text())
		if !ok {
			continue
		}
		slowest.mu.Lock()
		slowest.requests++
		if took > slowest.took {
			slowest.took = took
			slowest.where = fmt.Sprintf("member %s of %s", member, test)
			slowest.record = record
		}
		slowest.mu.Unlock()
	}
}

// parseSlowRequest reads one line of an etcd log: what a request over etcd's expected duration
// took, and the request, if the line reports one. A container log's line is "<time> <stream>
// <tag> <the line etcd wrote>".
func parseSlowRequest(line string) (time.Duration, string, bool) {
	if !strings.Contains(line, slowRequestMessage) {
		return 0, "", false
	}
	if i := strings.IndexByte(line, '{'); i > 0 {
		line = line[i:]
	}
	var rec struct {
		Took     string `json:"took"`
		Prefix   string `json:"prefix"`
		Request  string `json:"request"`
		Response string `json:"response"`
	}
	if json.Unmarshal([]byte(line), &rec) != nil {
		return 0, "", false
	}
	took, err := time.ParseDuration(rec.Took)
	if err != nil {
		return 0, "", false
	}
	return took, strings.TrimSpace(rec.Prefix + rec.Request), true
}

// SlowestLogEnv names a file that ReportSlowestEtcdRequest appends its line to: go test shows a
// passing package's output only with -v, so make test collects the lines there and prints them.
const SlowestLogEnv = "ETCDMEMBER_SLOWEST_LOG"

// ReportSlowestEtcdRequest prints one line on the slowest etcd request of every member this test
// binary ran, for a package's TestMain to call after its tests, and appends it, after the
// package's name, to the file SlowestLogEnv names.
func ReportSlowestEtcdRequest(pkg string) {
	line := slowestLine()
	fmt.Println(line)
	path := os.Getenv(SlowestLogEnv)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", SlowestLogEnv, err)
		return
	}
	defer func() { _ = f.Close() }()
	if _, err := fmt.Fprintf(f, "%s: %s\n", pkg, line); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", SlowestLogEnv, err)
	}
}

func slowestLine() string {
	slowest.mu.Lock()
	defer slowest.mu.Unlock()
	if slowest.requests == 0 {
		return "slowest etcd request: none took over etcd's expected 100ms"
	}
	record := slowest.record
	if len(record) > 200 {
		record = record[:200] + "..."
	}
	return fmt.Sprintf("slowest etcd request: %s (%s; %d requests over etcd's expected 100ms in all): %s",
		slowest.took, slowest.where, slowest.requests, record)
}
