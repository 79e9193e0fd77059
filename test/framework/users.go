package framework

import (
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/rest"
)

// User returns a credential for user in groups (a client certificate) without granting it
// anything: what it may do is whatever RBAC already binds to that user or those groups, such as
// the bindings config/default ships for the group etcdmember:agents.
func (a *APIServer) User(t TB, user string, groups ...string) (*rest.Config, string) {
	t.Helper()
	return a.ExpiringUser(t, certValidity, user, groups...)
}

// ExpiringUser is User with a certificate that expires validity from now.
func (a *APIServer) ExpiringUser(t TB, validity time.Duration, user string, groups ...string) (*rest.Config, string) {
	t.Helper()
	file := fmt.Sprintf("user-%d", a.users.Add(1))
	kp, err := a.c.ca.issueClientFor(a.dir, file, validity, user, groups...)
	if err != nil {
		t.Fatalf("certificate for %s: %v", user, err)
	}
	cfg, path, err := a.credential(file, kp)
	if err != nil {
		t.Fatalf("credential for %s: %v", user, err)
	}
	return cfg, path
}

// RenewUser replaces the kubeconfig at path with one for user in groups with a new certificate,
// as an operator renewing a credential does: the new file is written beside it, then renamed over
// it, so that a reader sees the old one or the new one whole.
func (a *APIServer) RenewUser(t TB, path, user string, groups ...string) {
	t.Helper()
	_, renewed := a.User(t, user, groups...)
	if err := os.Rename(renewed, path); err != nil {
		t.Fatalf("renewing %s: %v", path, err)
	}
}
