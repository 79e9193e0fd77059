// The agent's connections to the API.
//
// client-go sends every request of a client over one HTTP/2 connection, and the "kubernetes"
// Service balances connections, not requests: an agent whose connection landed on an apiserver
// that cannot reach its storage waits on every request there, while the other apiservers would
// answer. kubeadm makes that common: each node's apiserver stores through its own etcd member
// only, and `kubeadm upgrade` stops that member for a while. HTTP/2's health check does not help,
// since that apiserver still answers pings. So, as the kubelet does after failed heartbeats, the
// agent closes all of its API connections when a request gets no answer in time; its next
// requests dial again, and the Service picks again.
//
// A client certificate embedded in a kubeconfig (what `kubeadm kubeconfig user` writes) is read
// once by client-go, and the apiserver checks its expiry at every request. So the agent reads the
// kubeconfig's certificate again at each new connection, every certRecheck, and on an
// Unauthorized or Forbidden answer, and connects again once it has changed: a renewed credential
// needs no restart.

package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"

	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

const (
	// apiDialTimeout, apiKeepAlive, apiTLSHandshakeTimeout and apiIdleConnsPerHost are client-go's
	// own transport settings, which a transport of the agent's replaces.
	apiDialTimeout, apiKeepAlive = 30 * time.Second, 30 * time.Second
	apiTLSHandshakeTimeout       = 10 * time.Second
	apiIdleConnsPerHost          = 25
	// certRecheck is how often the agent reads its kubeconfig's client certificate again between
	// connections: a renewal usually comes weeks before the old certificate expires.
	certRecheck = time.Minute
)

// apiConfig returns a copy of cfg from which every API client of the agent must be made: a client
// made from cfg itself keeps its connection through an outage, and its certificate past a renewal.
// certificate reads the client certificate of cfg's kubeconfig again; nil, or a cfg without a
// client certificate, leaves authentication to client-go. The returned connections are a
// runnable, which watches the certificate.
func apiConfig(cfg *rest.Config, certificate func() ([]byte, []byte, error), log logr.Logger) (*rest.Config, *apiConnections, error) {
	cfg = rest.CopyConfig(cfg)
	dial := cfg.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: apiDialTimeout, KeepAlive: apiKeepAlive}).DialContext
	}
	conns := &apiConnections{dialer: connrotation.NewDialer(dial), log: log}
	// An exec plugin or auth provider may supply certificates of its own, which client-go
	// refuses next to a transport of the agent's; it renews them itself.
	if certificate != nil && (len(cfg.CertData) > 0 || cfg.CertFile != "") && cfg.ExecProvider == nil && cfg.AuthProvider == nil {
		if err := conns.presentRenewed(cfg, certificate); err != nil {
			return nil, nil, err
		}
	} else {
		cfg.Dial = conns.dialer.DialContext
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &reconnecting{next: rt, conns: conns} })
	return cfg, conns, nil
}

// presentRenewed gives cfg a transport of its own that presents, at each handshake, the
// certificate as certificate reads it then: client-go accepts no certificate callback in a
// rest.Config, only a transport with the TLS settings in it.
func (c *apiConnections) presentRenewed(cfg *rest.Config, certificate func() ([]byte, []byte, error)) error {
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return fmt.Errorf("the API server's TLS settings: %w", err)
	}
	c.cert = &clientCertificate{load: certificate}
	if _, err := c.cert.reload(); err != nil {
		return err
	}
	tlsConfig.GetClientCertificate = c.cert.get
	proxy := http.ProxyFromEnvironment
	if cfg.Proxy != nil {
		proxy = cfg.Proxy
	}
	cfg.Transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               proxy,
		TLSHandshakeTimeout: apiTLSHandshakeTimeout,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: apiIdleConnsPerHost,
		DialContext:         c.dialer.DialContext,
		DisableCompression:  cfg.DisableCompression,
	})
	// In the transport now; client-go refuses a transport next to TLS settings.
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	c.log.Info("Reading the kubeconfig's client certificate at each new API connection", "notAfter", c.cert.notAfter())
	return nil
}

// apiConnections are the connections of every client made from one configuration.
type apiConnections struct {
	dialer *connrotation.Dialer
	log    logr.Logger
	// cert is the client certificate read again at each connection; nil without one.
	cert *clientCertificate

	mu     sync.Mutex
	closed time.Time
}

// closeAll closes every connection, unless they were all closed since the timed-out request was
// sent: its timeout then says nothing about the connections open now, and closing them again
// would only cut off requests that may be on a good apiserver.
func (c *apiConnections) closeAll(sent time.Time, req *http.Request, why string) {
	c.mu.Lock()
	if !sent.After(c.closed) {
		c.mu.Unlock()
		return
	}
	c.closed = time.Now()
	c.mu.Unlock()
	c.log.Info("Closing the API connections: a request got no answer in time, perhaps from an apiserver that cannot reach its etcd; the next requests connect again",
		"method", req.Method, "path", req.URL.Path, "why", why)
	metrics.APIReconnects.Inc()
	c.dialer.CloseAll()
}

// recheckCertificate reads the client certificate again and, when it changed, closes the
// connections that present the old one.
func (c *apiConnections) recheckCertificate(why string) {
	changed, err := c.cert.reload()
	switch {
	case err != nil:
		c.log.Info("Keeping the client certificate in use: reading it again failed", "why", why, "error", err.Error())
	case changed:
		c.log.Info("The kubeconfig's client certificate changed; connecting again with it", "why", why, "notAfter", c.cert.notAfter())
		c.dialer.CloseAll()
	}
}

// Start rechecks the client certificate every certRecheck until ctx ends.
func (c *apiConnections) Start(ctx context.Context) error {
	if c.cert == nil {
		return nil
	}
	tick := time.NewTicker(certRecheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			c.recheckCertificate("periodic check")
		}
	}
}

// NeedLeaderElection is false: every agent keeps its own connections.
func (c *apiConnections) NeedLeaderElection() bool { return false }

// clientCertificate is the certificate the agent presents to the API server.
type clientCertificate struct {
	load func() ([]byte, []byte, error)

	mu              sync.Mutex
	certPEM, keyPEM []byte
	current         *tls.Certificate
	// changed says that a handshake presented a certificate the open connections may not have
	// (reload found it), and so that they are to be closed.
	changed bool
}

// get is the handshake's: the certificate as the kubeconfig has it now, or the last one read when
// it cannot be read (a renewal half written). A certificate that changed here is for the other
// connections to follow: the next recheck closes them.
func (c *clientCertificate) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if changed, err := c.reloadLocked(); err == nil && changed {
		c.changed = true
	}
	return c.current, nil
}

// reload reads the certificate again and tells whether it differs from the one the open
// connections may present.
func (c *clientCertificate) reload() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	changed, err := c.reloadLocked()
	if err != nil {
		return false, err
	}
	changed = changed || c.changed
	c.changed = false
	return changed, nil
}

func (c *clientCertificate) reloadLocked() (bool, error) {
	certPEM, keyPEM, err := c.load()
	if err != nil {
		return false, fmt.Errorf("reading the kubeconfig's client certificate: %w", err)
	}
	if c.current != nil && bytes.Equal(certPEM, c.certPEM) && bytes.Equal(keyPEM, c.keyPEM) {
		return false, nil
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return false, fmt.Errorf("the kubeconfig's client certificate: %w", err)
	}
	first := c.current == nil
	c.certPEM, c.keyPEM, c.current = certPEM, keyPEM, &pair
	return !first, nil
}

// notAfter is when the certificate in use expires.
func (c *clientCertificate) notAfter() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current == nil || c.current.Leaf == nil {
		return time.Time{}
	}
	return c.current.Leaf.NotAfter
}

// reconnecting wraps every API request of the agent: it closes the connections after a request
// that timed out, sends a read cut off by a close again, and checks the client certificate after
// an Unauthorized or Forbidden answer.
type reconnecting struct {
	next  http.RoundTripper
	conns *apiConnections
	// unbounded replaces unboundedTimeout in tests; zero means unboundedTimeout.
	unbounded time.Duration
}

func (t *reconnecting) RoundTrip(req *http.Request) (*http.Response, error) {
	limit := t.unbounded
	if limit == 0 {
		limit = unboundedTimeout
	}
	req, cancel := bounded(req, limit)
	resp, err := t.roundTrip(req)
	if err != nil {
		cancel()
		return resp, err
	}
	// The deadline covers the body, which the caller reads after RoundTrip has returned.
	resp.Body = &afterBody{ReadCloser: resp.Body, then: cancel}
	return resp, nil
}

func (t *reconnecting) roundTrip(req *http.Request) (*http.Response, error) {
	sent := time.Now()
	resp, err := t.next.RoundTrip(req)
	if err != nil && errors.Is(err, net.ErrClosed) && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
		// A connection closed here (only a local close gives net.ErrClosed; the apiserver's
		// would be an EOF or a reset): the request was in flight on it, or went to it in the
		// moment before the transport let it go. A read is sent again on a new connection; a
		// write is not, since the apiserver may have applied it, and its caller's retry reads
		// the object first.
		resp, err = t.next.RoundTrip(req.Clone(req.Context()))
	}
	if err != nil {
		// A request whose deadline had passed before it was sent says nothing of the connections.
		if deadline, ok := req.Context().Deadline(); ok && deadline.After(sent) && errors.Is(req.Context().Err(), context.DeadlineExceeded) {
			t.conns.closeAll(sent, req, "the request's deadline passed")
		}
		return resp, err
	}
	// Both after the body, which the caller reads for the apiserver's reason, and which closing
	// the connection now would cut off.
	switch {
	case resp.StatusCode == http.StatusGatewayTimeout:
		resp.Body = &afterBody{ReadCloser: resp.Body, then: func() {
			t.conns.closeAll(sent, req, "the apiserver answered 504 Gateway Timeout")
		}}
	case (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) && t.conns.cert != nil:
		// Unauthorized: the certificate expired, perhaps renewed since. Forbidden: perhaps made
		// again with the right group, as the runbook mends a wrong one.
		why := http.StatusText(resp.StatusCode)
		resp.Body = &afterBody{ReadCloser: resp.Body, then: func() { t.conns.recheckCertificate(why) }}
	}
	return resp, nil
}

// unboundedTimeout bounds a request sent without a deadline of its own, a watch excepted: the
// informers' lists and the REST mapper's discovery. One that lands on an apiserver that cannot
// reach its etcd otherwise waits for that apiserver's own --request-timeout (a minute), and no
// close follows: a new leader's caches once took 60 s to fill so, while the member whose etcd
// kubeadm was upgrading stayed Healthy=True (issue #49). The status writes' timeout, which a
// control plane that answers slowly but answers stays within (issue #48's 7 s stall).
const unboundedTimeout = status.APITimeout

// bounded gives req a deadline of limit unless it has one or is a watch, which stays open by
// design; cancel releases it once the response's body is read.
func bounded(req *http.Request, limit time.Duration) (*http.Request, context.CancelFunc) {
	if _, ok := req.Context().Deadline(); ok || isWatch(req) {
		return req, func() {}
	}
	ctx, cancel := context.WithTimeout(req.Context(), limit)
	return req.WithContext(ctx), cancel
}

// isWatch tells a watch request, as the apiserver does: the watch parameter set to true.
func isWatch(req *http.Request) bool {
	switch req.URL.Query().Get("watch") {
	case "true", "1":
		return true
	}
	return false
}

// WrappedRoundTripper lets client-go's debugging and connection handling see through the wrapper.
func (t *reconnecting) WrappedRoundTripper() http.RoundTripper { return t.next }

// afterBody calls then once the body is closed, the first time.
type afterBody struct {
	io.ReadCloser
	then func()
	once sync.Once
}

func (b *afterBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.then)
	return err
}
