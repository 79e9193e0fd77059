package etcd

import (
	"net"
	"testing"
)

// closedURL returns an http URL on a port that was just free: nothing listens there.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return "http://" + l.Addr().String()
}
