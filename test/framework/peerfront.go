package framework

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

const (
	// peekTimeout bounds the wait for a request head: rafthttp writes it at once, so only a
	// client that speaks first after the server (none does in etcd) or a hung one waits it out.
	peekTimeout = 2 * time.Second
	// maxHeadBytes bounds a request head; rafthttp's are well under 1 KiB.
	maxHeadBytes = 16 << 10
)

var errNotHTTP = errors.New("not a plaintext HTTP request")

// routePeer returns the route of dst's peer front. etcd dials every peer from 127.0.0.1, so the
// sender is learned from the head of the plaintext HTTP request: rafthttp names its own peer URLs
// (X-PeerURLs) and its ID (X-Server-From) on the stream and pipeline requests that carry raft
// messages. The peer URL is tried first because the framework knows it before the member starts,
// while the ID is learned only once the member serves, after its first streams are up. Whatever
// names no member goes through ingress.
func (f *clusterFaults) routePeer(dst *Member, ingress *faultProxy) func(net.Conn) (*faultProxy, io.Reader) {
	return func(c net.Conn) (*faultProxy, io.Reader) {
		br := bufio.NewReaderSize(c, 4096)
		_ = c.SetReadDeadline(time.Now().Add(peekTimeout))
		head, hdr, err := readRequestHead(br)
		_ = c.SetReadDeadline(time.Time{})
		if err != nil {
			// TLS, or no request head in time: whatever was read goes on first.
			return ingress, io.MultiReader(bytes.NewReader(head), br)
		}
		src := f.sender(hdr)
		if src == nil || src == dst {
			// The connection is routed once, on its first request; closing it after that
			// request keeps a later one that does name its sender off ingress.
			return ingress, io.MultiReader(bytes.NewReader(closeAfterRequest(head)), br)
		}
		p, err := f.pair(src, dst)
		if err != nil {
			f.net.lg.Info("no peer link", zap.String("from", src.Name), zap.String("to", dst.Name), zap.Error(err))
			return nil, nil
		}
		return p, io.MultiReader(bytes.NewReader(head), br)
	}
}

// sender returns the member a request head says it comes from, or nil.
func (f *clusterFaults) sender(hdr http.Header) *Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	for u := range strings.SplitSeq(hdr.Get("X-PeerURLs"), ",") {
		if m := f.byPeerURL[u]; m != nil {
			return m
		}
	}
	id, err := strconv.ParseUint(hdr.Get("X-Server-From"), 16, 64)
	if err != nil || id == 0 {
		return nil
	}
	for _, m := range f.byPeerURL {
		if m.ID() == id {
			return m
		}
	}
	return nil
}

// readRequestHead reads an HTTP/1 request head from r and parses its header. The bytes read are
// returned even on error, for the caller to pass on; a connection whose first byte cannot start
// a request method (a TLS handshake starts with 0x16) is not read at all.
func readRequestHead(r *bufio.Reader) ([]byte, http.Header, error) {
	first, err := r.Peek(1)
	if err != nil {
		return nil, nil, err
	}
	if first[0] < 'A' || first[0] > 'Z' {
		return nil, nil, errNotHTTP
	}
	var head []byte
	lineStart := true
	for len(head) <= maxHeadBytes {
		frag, err := r.ReadSlice('\n')
		head = append(head, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			lineStart = false
			continue
		}
		if err != nil {
			return head, nil, err
		}
		if lineStart && (string(frag) == "\r\n" || string(frag) == "\n") {
			tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
			if _, err := tp.ReadLine(); err != nil {
				return head, nil, err
			}
			hdr, err := tp.ReadMIMEHeader()
			if err != nil {
				return head, nil, err
			}
			return head, http.Header(hdr), nil
		}
		lineStart = true
	}
	return head, nil, errNotHTTP
}

// closeAfterRequest adds "Connection: close" right after the request line, where it is the first
// Connection header the server reads.
func closeAfterRequest(head []byte) []byte {
	i := bytes.IndexByte(head, '\n') + 1
	out := make([]byte, 0, len(head)+len("Connection: close\r\n"))
	out = append(out, head[:i]...)
	out = append(out, "Connection: close\r\n"...)
	return append(out, head[i:]...)
}
