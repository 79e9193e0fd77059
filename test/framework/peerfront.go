package framework

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
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
// dialing member is learned from the head of the plaintext HTTP request: rafthttp names its own
// peer URLs (X-PeerURLs) and its ID (X-Server-From) on the stream, pipeline and snapshot requests
// that carry raft messages. The peer URL is tried first because the framework knows it before the
// member starts, while the ID is learned only once the member serves, after its first streams are
// up. Whatever names no member goes through ingress.
//
// Whose messages a connection carries depends on its kind as well as on its dialer (see
// PeerLink): a stream (GET /raft/stream/...) carries the dialed member's messages back to the
// dialer, every other request (POST /raft, POST /raft/snapshot) the dialer's messages. So each
// (dialer, dialed, kind) has a proxy of its own, and PeerLink faults only the proxies and halves
// that carry its sender's messages.
//
// A connection is routed once, on its first request, so it must carry one kind only, and
// rafthttp never mixes them: streams use its streamRt, which keeps no idle connections
// (MaxIdleConnsPerHost -1), so each stream has a connection to itself, while posts use its
// pipelineRt, which reuses a connection only for further posts and for the probes of its pipeline
// prober (GET /raft/probing, which names no sender: a probe that opens a connection goes to
// ingress, one on a post connection shares the posts' faults, which only skews etcd's RTT gauge).
// etcdserver's own peer calls (version checks, member lists, forwarded lease requests) have a
// transport of their own and name no sender.
func (f *clusterFaults) routePeer(dst *Member, ingress *faultProxy) func(net.Conn) (*faultProxy, io.Reader) {
	return func(c net.Conn) (*faultProxy, io.Reader) {
		br := bufio.NewReaderSize(c, 4096)
		_ = c.SetReadDeadline(time.Now().Add(peekTimeout))
		req, err := readRequestHead(br)
		_ = c.SetReadDeadline(time.Time{})
		if err != nil {
			// TLS, or no request head in time: whatever was read goes on first.
			return ingress, io.MultiReader(bytes.NewReader(req.raw), br)
		}
		src := f.sender(req.header)
		if src == nil || src == dst {
			// The connection is routed once, on its first request; closing it after that
			// request keeps a later one that does name its sender off ingress.
			return ingress, io.MultiReader(bytes.NewReader(closeAfterRequest(req.raw)), br)
		}
		kind := req.peerConnKind()
		p, err := f.peerProxy(src, dst, kind)
		if err != nil {
			f.net.lg.Info("no peer link", zap.String("dialer", src.Name), zap.String("dialed", dst.Name),
				zap.Stringer("kind", kind), zap.Error(err))
			return nil, nil
		}
		return p, io.MultiReader(bytes.NewReader(req.raw), br)
	}
}

// raftStreamPrefix starts the path of every request that opens a rafthttp stream
// (rafthttp.RaftStreamPrefix).
const raftStreamPrefix = "/raft/stream/"

// peerConnKind tells what a connection whose first request is r carries.
func (r requestHead) peerConnKind() peerConnKind {
	if r.method == http.MethodGet && strings.HasPrefix(r.path, raftStreamPrefix) {
		return streamConn
	}
	return postConn
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

// requestHead is the head of an HTTP/1 request as it was read.
type requestHead struct {
	// raw is the bytes read, to be passed on as they were.
	raw []byte
	// method and path are from the request line; path is empty for a target that is not a path.
	method, path string
	header       http.Header
}

// readRequestHead reads an HTTP/1 request head from r and parses its request line and header.
// The bytes read are returned in raw even on error, for the caller to pass on; a connection whose
// first byte cannot start a request method (a TLS handshake starts with 0x16) is not read at all.
func readRequestHead(r *bufio.Reader) (requestHead, error) {
	first, err := r.Peek(1)
	if err != nil {
		return requestHead{}, err
	}
	if first[0] < 'A' || first[0] > 'Z' {
		return requestHead{}, errNotHTTP
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
			return requestHead{raw: head}, err
		}
		if lineStart && (string(frag) == "\r\n" || string(frag) == "\n") {
			return parseRequestHead(head)
		}
		lineStart = true
	}
	return requestHead{raw: head}, errNotHTTP
}

// parseRequestHead parses a complete request head.
func parseRequestHead(head []byte) (requestHead, error) {
	req := requestHead{raw: head}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	line, err := tp.ReadLine()
	if err != nil {
		return req, err
	}
	method, rest, ok := strings.Cut(line, " ")
	target, _, ok2 := strings.Cut(rest, " ")
	if !ok || !ok2 {
		return req, errNotHTTP
	}
	req.method = method
	if u, err := url.ParseRequestURI(target); err == nil {
		req.path = u.Path
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		return req, err
	}
	req.header = http.Header(hdr)
	return req, nil
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
