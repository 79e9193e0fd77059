package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// TestRequireLeadableEtcdUnansweredIsNotTooOld: an etcd that does not answer has not shown an old
// version. The caller retries that error and stays out of the election for good only on
// ErrEtcdTooOld, so mixing the two up would turn a slow start into a permanent refusal.
func TestRequireLeadableEtcdUnansweredIsNotTooOld(t *testing.T) {
	// Port 1 on loopback: nothing listens there, so the call fails without any server.
	const endpoint = "http://127.0.0.1:1"
	c, err := etcd.New(etcd.Config{Endpoints: []string{endpoint}, DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()

	err = requireLeadableEtcd(ctx, c, endpoint)
	if err == nil {
		t.Fatal("requireLeadableEtcd accepted an etcd that never answered")
	}
	if errors.Is(err, etcd.ErrEtcdTooOld) {
		t.Errorf("unanswered Status reported as too old: %v", err)
	}
	if !strings.Contains(err.Error(), endpoint) {
		t.Errorf("error %q does not name the endpoint", err)
	}
}
