package framework

import (
	"fmt"

	"k8s.io/client-go/rest"
)

// User returns a credential for user in groups (a client certificate) without granting it
// anything: what it may do is whatever RBAC already binds to that user or those groups, such as
// the bindings config/default ships for the group etcdmember:agents.
func (a *APIServer) User(t TB, user string, groups ...string) (*rest.Config, string) {
	t.Helper()
	file := fmt.Sprintf("user-%d", a.users.Add(1))
	kp, err := a.c.ca.issueClient(a.dir, file, user, groups...)
	if err != nil {
		t.Fatalf("certificate for %s: %v", user, err)
	}
	cfg, path, err := a.credential(file, kp)
	if err != nil {
		t.Fatalf("credential for %s: %v", user, err)
	}
	return cfg, path
}
