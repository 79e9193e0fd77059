package framework

import (
	"testing"
	"time"
)

// TestParseSlowRequest reads etcd's report of a slow request as the framework's members write it,
// and as a kubelet keeps it in a static pod's container log, behind the runtime's prefix.
func TestParseSlowRequest(t *testing.T) {
	const record = `{"level":"warn","ts":"2026-12-06T02:44:11.3Z","caller":"etcdserver/util.go:170","msg":"apply request took too long","took":"1.5s","expected-duration":"100ms","prefix":"read-only range ","request":"key:\"/registry/pods\" limit:1","response":"range_response_count:1"}`
	for name, line := range map[string]string{
		"etcd's own log":  record,
		"a container log": "2026-12-06T02:44:11.321757Z stderr F " + record,
	} {
		took, req, ok := parseSlowRequest(line)
		if !ok || took != 1500*time.Millisecond || req != `read-only range key:"/registry/pods" limit:1` {
			t.Errorf("%s: got %s %q %v, want 1.5s and the request", name, took, req, ok)
		}
	}
	for _, line := range []string{
		`{"level":"info","msg":"serving client traffic securely"}`,
		"2026-12-06T02:44:11.321757Z stderr F apply request took too long, not JSON",
	} {
		if _, _, ok := parseSlowRequest(line); ok {
			t.Errorf("%q read as a slow request", line)
		}
	}
}
