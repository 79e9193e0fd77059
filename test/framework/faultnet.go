package framework

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Every link is a chain of three hops, front -> etcd proxy -> relay -> target:
//
//   - the front is a TCP listener on the target member's own address (so that its serving
//     certificate covers it) on a port the kernel picks; it is the URL the dialing side is given;
//   - the etcd proxy (go.etcd.io/etcd/pkg/v3/proxy) applies the faults. It listens on an abstract
//     unix socket: over TCP it would listen on ":<port>", every interface, and need a port free on
//     all of them, while the members share fixed ports on addresses of their own;
//   - the relay dials the target for each connection the proxy makes. The proxy drops a
//     connection it cannot forward without closing it, so that a stopped member would look hung
//     to every client; the relay closes it instead, which the proxy passes back as a close.
const (
	// relayDialTimeout bounds the relay's dial of a member, which on loopback only a paused or
	// overloaded machine makes slow.
	relayDialTimeout = 3 * time.Second
	// acceptRetry is the pause after an accept error other than a closed listener (out of file
	// descriptors), so that the loop does not spin.
	acceptRetry = 10 * time.Millisecond
)

// faultNet owns the links of one owner (a cluster, an apiserver): their fronts, proxies and
// relays, and the log they write to. newFaultNet registers its close before the owner starts
// processes that dial through it, so the cleanup runs after those are killed and no process sees
// its links vanish.
type faultNet struct {
	lg      *zap.Logger
	logFile *os.File
	// sockets is the prefix of the abstract unix socket names, random so that test binaries
	// running side by side never collide.
	sockets string

	mu      sync.Mutex
	closed  bool
	next    int
	fronts  []*connServer
	relays  map[string]*relay // by target address
	proxies []*faultProxy
}

func newFaultNet(t TB, logPath string) *faultNet {
	t.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("fault proxy log: %v", err)
	}
	// The proxies log every fault they apply at Info and every byte they move at Debug.
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(f), zapcore.InfoLevel)
	n := &faultNet{
		lg:      zap.New(core),
		logFile: f,
		sockets: "@etcdmember-fault-" + rand.Text(),
		relays:  map[string]*relay{},
	}
	t.Cleanup(n.close)
	return n
}

var errFaultNetClosed = errors.New("fault proxies are closed")

// newLink starts a proxy to target with a front of its own on ip, and returns the proxy and the
// front's host:port.
func (n *faultNet) newLink(name, ip, target string) (*faultProxy, string, error) {
	p, err := n.newProxy(name, target)
	if err != nil {
		return nil, "", err
	}
	addr, err := n.newFront(ip, func(net.Conn) (*faultProxy, io.Reader) { return p, nil })
	if err != nil {
		return nil, "", err
	}
	return p, addr, nil
}

// newFront listens on a port of ip the kernel picks and carries every connection through the
// proxy route chooses. route may read the start of the connection; it returns what the proxy must
// be sent first (nil: just the connection) and a nil proxy to drop the connection.
func (n *faultNet) newFront(ip string, route func(net.Conn) (*faultProxy, io.Reader)) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return "", errFaultNetClosed
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return "", fmt.Errorf("fault proxy front on %s: %w", ip, err)
	}
	s := serveConns(ln, func(c net.Conn) {
		p, src := route(c)
		if p == nil {
			return
		}
		if src == nil {
			src = c
		}
		p.carry(c, src)
	})
	n.fronts = append(n.fronts, s)
	return ln.Addr().String(), nil
}

// newProxy starts an etcd proxy whose far end is target.
func (n *faultNet) newProxy(name, target string) (*faultProxy, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errFaultNetClosed
	}
	r, err := n.relayLocked(target)
	if err != nil {
		return nil, err
	}
	sock := n.socketLocked()
	lg := n.lg.Named(name)
	srv := proxy.NewServer(proxy.ServerConfig{
		From:   url.URL{Scheme: "unix", Host: sock},
		To:     url.URL{Scheme: "unix", Host: r.sock},
		Logger: lg,
	})
	select {
	case <-srv.Ready():
	case <-srv.Done():
		// NewServer queues the listen error before closing.
		select {
		case err := <-srv.Error():
			return nil, fmt.Errorf("fault proxy %s: %w", name, err)
		default:
			return nil, fmt.Errorf("fault proxy %s closed before serving", name)
		}
	}
	// The proxy's accept loop blocks once 16 errors wait unread, and every connection that
	// ends badly queues one.
	go func() {
		for {
			select {
			case err := <-srv.Error():
				lg.Info("proxy error", zap.Error(err))
			case <-srv.Done():
				return
			}
		}
	}()
	p := &faultProxy{name: name, srv: srv, sock: sock, lg: lg}
	n.proxies = append(n.proxies, p)
	return p, nil
}

func (n *faultNet) relayLocked(target string) (*relay, error) {
	if r := n.relays[target]; r != nil {
		return r, nil
	}
	sock := n.socketLocked()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("fault proxy relay to %s: %w", target, err)
	}
	r := &relay{sock: sock, connServer: serveConns(ln, func(c net.Conn) {
		out, err := net.DialTimeout("tcp", target, relayDialTimeout)
		if err != nil {
			return // closing c is how the dialing side learns the member is down
		}
		newSplice(c, out).run(c)
	})}
	n.relays[target] = r
	return r, nil
}

func (n *faultNet) socketLocked() string {
	n.next++
	return fmt.Sprintf("%s-%d", n.sockets, n.next)
}

// close tears the links down front first, so that each proxy's connections end before the proxy
// is closed: proxy.Server's Close waits for the connections it carries.
func (n *faultNet) close() {
	n.mu.Lock()
	n.closed = true
	fronts, relays, proxies := n.fronts, n.relays, n.proxies
	n.mu.Unlock()
	for _, s := range fronts {
		s.close()
	}
	for _, r := range relays {
		r.close()
	}
	for _, p := range proxies {
		p.close()
	}
	_ = n.lg.Sync()
	_ = n.logFile.Close()
}

// half is one direction of a proxy: tx the dialing side's bytes toward the member, rx the
// member's bytes back.
type half int

const (
	tx half = iota
	rx
)

func (h half) String() string {
	if h == tx {
		return "tx"
	}
	return "rx"
}

// faultProxy is one etcd proxy and the connections it carries.
type faultProxy struct {
	name string
	srv  proxy.Server
	sock string
	lg   *zap.Logger

	conns connSet
	mu    sync.Mutex
	// dropped records the halves blackholed since their last heal. A blackhole drops bytes from
	// the middle of a connection, which no real network does to a TCP stream: a connection that
	// lived through one may be corrupt, so every connection of the proxy is reset when the half
	// heals (which ones lost bytes is not tracked).
	dropped [2]bool
	// stalled records the halves paused since their last heal.
	stalled [2]bool
}

// carry splices c, whose bytes start with what src yields, into the proxy.
func (p *faultProxy) carry(c net.Conn, src io.Reader) {
	in, err := net.Dial("unix", p.sock)
	if err != nil {
		p.lg.Info("dial fault proxy", zap.Error(err))
		return
	}
	s := newSplice(c, in)
	if !p.conns.add(s) {
		_ = s.Close()
		return
	}
	defer p.conns.remove(s)
	s.run(src)
}

func (p *faultProxy) blackhole(h half) {
	p.mu.Lock()
	p.dropped[h] = true
	p.mu.Unlock()
	if h == tx {
		p.srv.BlackholeTx()
	} else {
		p.srv.BlackholeRx()
	}
}

// stall pauses h once: the proxy's PauseTx and PauseRx replace the channel its copies wait on, so
// a second pause would strand every copy waiting on the first.
func (p *faultProxy) stall(h half) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled[h] {
		return
	}
	p.stalled[h] = true
	if h == tx {
		p.srv.PauseTx()
	} else {
		p.srv.PauseRx()
	}
}

// delay sets the latency of h; latency <= 0 removes it, which the proxy's own DelayTx and DelayRx
// would ignore.
func (p *faultProxy) delay(h half, latency, jitter time.Duration) {
	switch {
	case latency <= 0 && h == tx:
		p.srv.UndelayTx()
	case latency <= 0:
		p.srv.UndelayRx()
	case h == tx:
		p.srv.DelayTx(latency, jitter)
	default:
		p.srv.DelayRx(latency, jitter)
	}
}

// heal lifts every fault of h. If h was blackholed, every connection the proxy carries is reset
// first, whether or not it lost bytes, while the bytes still drop: a connection with a hole must
// not carry another byte. rafthttp's msgapp stream encodes an append that follows the previous
// one without its index, so a stream resumed after a hole hands raft appends at a wrong index,
// and the follower panics ("index, 5, is out of range [1]": the chaos run of seed 408343039,
// scenario 124, where the lifting came before the reset). Connections are reset once more after
// the lifting: one opened in between lost its first bytes.
func (p *faultProxy) heal(h half) {
	p.mu.Lock()
	lossy := p.dropped[h]
	p.dropped[h] = false
	p.stalled[h] = false
	p.mu.Unlock()
	n := 0
	if lossy {
		n = p.conns.reset()
	}
	if h == tx {
		p.srv.UnblackholeTx()
		p.srv.UndelayTx()
		p.srv.UnpauseTx()
	} else {
		p.srv.UnblackholeRx()
		p.srv.UndelayRx()
		p.srv.UnpauseRx()
	}
	if lossy {
		n += p.conns.reset()
		p.lg.Info("reset connections after a blackhole", zap.Stringer("half", h), zap.Int("connections", n))
	}
}

func (p *faultProxy) close() {
	p.conns.closeAll()
	if err := p.srv.Close(); err != nil {
		p.lg.Info("close fault proxy", zap.Error(err))
	}
}

// relay is the proxies' way out to one target address.
type relay struct {
	sock string
	*connServer
}

// connServer runs a handler for each connection a listener accepts, and closes the connection
// when the handler returns.
type connServer struct {
	ln    net.Listener
	conns connSet
	wg    sync.WaitGroup
}

func serveConns(ln net.Listener, handle func(net.Conn)) *connServer {
	s := &connServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				time.Sleep(acceptRetry)
				continue
			}
			if !s.conns.add(c) {
				_ = c.Close()
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer s.conns.remove(c)
				defer func() { _ = c.Close() }()
				handle(c)
			}()
		}
	}()
	return s
}

// close stops accepting, closes every connection, and waits for the handlers: closing a
// connection ends the splice it is part of.
func (s *connServer) close() {
	_ = s.ln.Close()
	s.conns.closeAll()
	s.wg.Wait()
}

// splice joins two connections; it ends, closing both, as soon as either direction ends, as
// proxy.Server does with the connections it carries.
type splice struct {
	a, b net.Conn
	once sync.Once
}

func newSplice(a, b net.Conn) *splice { return &splice{a: a, b: b} }

// run copies src (a's bytes, perhaps with some already read in front) to b and b to a.
func (s *splice) run(src io.Reader) {
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(s.b, src)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(s.a, s.b)
		done <- struct{}{}
	}()
	<-done
	_ = s.Close()
	<-done
}

func (s *splice) Close() error {
	s.once.Do(func() {
		_ = s.a.Close()
		_ = s.b.Close()
	})
	return nil
}

// connSet tracks open connections so that they can be closed together.
type connSet struct {
	mu     sync.Mutex
	closed bool
	m      map[io.Closer]struct{}
}

// add tracks c, or reports false once the set is closed.
func (s *connSet) add(c io.Closer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.m == nil {
		s.m = map[io.Closer]struct{}{}
	}
	s.m[c] = struct{}{}
	return true
}

func (s *connSet) remove(c io.Closer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, c)
}

// reset closes the connections tracked now and returns how many; later ones are tracked as usual.
func (s *connSet) reset() int {
	s.mu.Lock()
	conns := make([]io.Closer, 0, len(s.m))
	for c := range s.m {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	return len(conns)
}

// closeAll closes every connection and refuses new ones.
func (s *connSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.reset()
}
