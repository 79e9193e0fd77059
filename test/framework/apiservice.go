package framework

import (
	"net"
	"strconv"
	"sync"
	"time"
)

// apiServiceDialTimeout bounds the front's dial of a backend; loopback answers at once or not at all.
const apiServiceDialTimeout = 5 * time.Second

// APIService stands in front of several apiservers as the "kubernetes" Service does under
// kube-proxy: it picks a backend when a connection opens, and that connection stays with it until
// it closes, whatever the routing says later (kube-proxy's conntrack entries do the same). A
// client that keeps one connection open, as client-go does over HTTP/2, therefore stays with its
// apiserver until it closes that connection itself. kubeadm's control plane is the case that
// matters: each node's apiserver stores through its own etcd member only.
type APIService struct {
	ip  string
	srv *connServer

	mu      sync.Mutex
	backend *APIServer
	open    map[*APIServer]int
}

// NewAPIService listens on a fresh loopback address and sends new connections to backend until
// Route says otherwise. It closes at t's cleanup, after the processes started later have been
// stopped.
func NewAPIService(t TB, backend *APIServer) *APIService {
	t.Helper()
	ip, err := allocateIP(apiserverPort)
	if err != nil {
		t.Fatalf("API service address: %v", err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(apiserverPort)))
	if err != nil {
		t.Fatalf("API service: %v", err)
	}
	s := &APIService{ip: ip, backend: backend, open: map[*APIServer]int{}}
	s.srv = serveConns(ln, s.carry)
	t.Cleanup(s.srv.close)
	return s
}

// carry joins a client's connection to the backend routed to as it opened.
func (s *APIService) carry(c net.Conn) {
	s.mu.Lock()
	b := s.backend
	s.open[b]++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.open[b]--
		s.mu.Unlock()
	}()
	up, err := net.DialTimeout("tcp", net.JoinHostPort(b.ip, strconv.Itoa(apiserverPort)), apiServiceDialTimeout)
	if err != nil {
		return
	}
	newSplice(c, up).run(c)
}

// Route sends the connections that open from now on to backend; open ones keep theirs.
func (s *APIService) Route(backend *APIServer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.backend = backend
}

// Reset closes every connection open through the service, as a restart of the apiservers would,
// and returns how many it closed. Clients dial again, to wherever Route says.
func (s *APIService) Reset() int { return s.srv.conns.reset() }

// Open returns how many client connections are open to backend through the service.
func (s *APIService) Open(backend *APIServer) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open[backend]
}

// ClientArgs are the kubectl connection flags that point a client at the service. The name the
// client verifies is one every apiserver's serving certificate carries, as it carries the
// Service's.
func (s *APIService) ClientArgs() []string {
	return []string{
		"--server=https://" + net.JoinHostPort(s.ip, strconv.Itoa(apiserverPort)),
		"--tls-server-name=kubernetes",
	}
}
