package framework

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestPeerRequestKind reads the heads of the requests rafthttp sends, written by net/http as its
// transports write them, and checks the kind each connection is routed as: a stream carries the
// dialed member's messages, everything else the dialer's.
func TestPeerRequestKind(t *testing.T) {
	const peer = "http://127.1.2.3:40000"
	for _, tc := range []struct {
		method, path string
		body         string
		want         peerConnKind
	}{
		{http.MethodGet, "/raft/stream/msgapp/8e9e05c52164694d", "", streamConn},
		{http.MethodGet, "/raft/stream/message/8e9e05c52164694d", "", streamConn},
		{http.MethodPost, "/raft", "raft message", postConn},
		{http.MethodPost, "/raft/snapshot", "snapshot", postConn},
		{http.MethodPost, "/raft/stream/message/8e9e05c52164694d", "", postConn},
		{http.MethodGet, "/raft/probing", "", postConn},
	} {
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		req, err := http.NewRequest(tc.method, peer+tc.path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Server-From", "8e9e05c52164694d")
		req.Header.Set("X-PeerURLs", peer)
		var wire bytes.Buffer
		if err := req.Write(&wire); err != nil {
			t.Fatal(err)
		}
		sent := wire.String()
		br := bufio.NewReader(&wire)
		head, err := readRequestHead(br)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		if head.method != tc.method || head.path != tc.path || head.header.Get("X-Server-From") != "8e9e05c52164694d" {
			t.Errorf("%s %s read as %s %s, X-Server-From %q", tc.method, tc.path, head.method, head.path, head.header.Get("X-Server-From"))
		}
		if got := head.peerConnKind(); got != tc.want {
			t.Errorf("%s %s routed as %q, want %q", tc.method, tc.path, got, tc.want)
		}
		rest, _ := io.ReadAll(br)
		if got := string(head.raw) + string(rest); got != sent {
			t.Errorf("%s %s passed on as %q, want %q", tc.method, tc.path, got, sent)
		}
	}
}

// TestPeerRequestHeadNotHTTP: a TLS handshake is not read at all, and a request line that is not
// one is refused, both with what was read kept for the caller to pass on.
func TestPeerRequestHeadNotHTTP(t *testing.T) {
	head, err := readRequestHead(bufio.NewReader(strings.NewReader("\x16\x03\x01\x02\x00")))
	if err == nil || len(head.raw) != 0 {
		t.Errorf("TLS record read as %q, %v; want nothing read and an error", head.raw, err)
	}
	const garbage = "GARBAGE\r\nX: y\r\n\r\n"
	head, err = readRequestHead(bufio.NewReader(strings.NewReader(garbage)))
	if err == nil || string(head.raw) != garbage {
		t.Errorf("%q read as %q, %v; want all of it read and an error", garbage, head.raw, err)
	}
}
