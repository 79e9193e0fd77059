//go:build bench

package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"time"
)

// auditPolicy has the apiserver log every request about Nodes, and every write to an EtcdMember,
// at the Metadata level (who, what, when; no bodies), and nothing else. The bench's own creates
// of Nodes are left out: thousands of lines that say nothing.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: [framework-admin]
  verbs: [create]
  resources: [{group: "", resources: [nodes]}]
- level: Metadata
  resources: [{group: "", resources: [nodes]}]
- level: Metadata
  verbs: [create, update, patch, delete]
  resources: [{group: etcdmember.io, resources: [etcdmembers, etcdmembers/status]}]
- level: None
`

// adminUser is the framework's admin credential, which the bench, kubectl and the plugin use;
// agentUser is the agents' least-privilege one (api.User in newEnvWith).
const (
	adminUser = "framework-admin"
	agentUser = "etcdmember-agent"
)

// auditEvent is what the bench reads of one audit event.
type auditEvent struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Name        string `json:"name"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	// Received is when the apiserver received the request, Done when it had answered it (the
	// stage ResponseComplete), both to the microsecond.
	Received time.Time `json:"requestReceivedTimestamp"`
	Done     time.Time `json:"stageTimestamp"`
}

// readAudit returns the events of the env's audit log, in the order logged: a request's
// ResponseComplete stage, and a watch's ResponseStarted as well. A line still being written is
// left for the next read.
func (e *env) readAudit() []auditEvent {
	e.t.Helper()
	if e.auditLog == "" {
		e.t.Fatal("this test bed keeps no audit log (envOptions.audit)")
	}
	data, err := os.ReadFile(e.auditLog)
	if err != nil {
		e.t.Fatalf("audit log: %v", err)
	}
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	var out []auditEvent
	for line := range bytes.Lines(data) {
		var ev auditEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			e.t.Fatalf("audit log %s: %v", e.auditLog, err)
		}
		out = append(out, ev)
	}
	return out
}

// firstAudit returns the first completed request received from from on that ok accepts.
func firstAudit(events []auditEvent, from time.Time, ok func(auditEvent) bool) (auditEvent, bool) {
	for _, ev := range events {
		if ev.Stage == "ResponseComplete" && !ev.Received.Before(from) && ok(ev) {
			return ev, true
		}
	}
	return auditEvent{}, false
}
