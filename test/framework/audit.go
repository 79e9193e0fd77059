package framework

import (
	"os"
	"path/filepath"
)

// EnableAudit restarts the apiserver with an audit log that policy (an audit.k8s.io/v1 Policy, in
// YAML) selects, and returns the log's path: one JSON event per line, in which the apiserver
// stamps each request's arrival and each stage to the microsecond. The restart drops every
// connection and watch, so call it before anything relies on them. The flags stay for later
// restarts.
func (a *APIServer) EnableAudit(t TB, policy string) string {
	t.Helper()
	policyFile, logFile := filepath.Join(a.dir, "audit-policy.yaml"), filepath.Join(a.dir, "audit.log")
	if err := os.WriteFile(policyFile, []byte(policy), 0o600); err != nil {
		t.Fatalf("audit policy: %v", err)
	}
	if err := a.proc.stop(); err != nil {
		t.Fatalf("stop apiserver: %v", err)
	}
	a.args = append(a.args, "--audit-policy-file="+policyFile, "--audit-log-path="+logFile)
	a.start(t)
	return logFile
}
