// The agent's connections to the API. client-go sends every request of a client over one HTTP/2
// connection, and the "kubernetes" Service balances connections, not requests: an agent whose
// connection landed on an apiserver that cannot reach its storage waits on every request there,
// while the other apiservers would answer. kubeadm makes that common: each node's apiserver
// stores through its own etcd member only, and `kubeadm upgrade` stops that member for a while.
// HTTP/2's health check does not help, since that apiserver still answers pings. So, as the
// kubelet does after failed heartbeats, the agent closes all of its API connections when a
// request gets no answer in time; its next requests dial again, and the Service picks again.

package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"

	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
)

// apiDialTimeout and apiKeepAlive are client-go's own dial settings, which a custom dial replaces.
const apiDialTimeout, apiKeepAlive = 30 * time.Second, 30 * time.Second

// withReconnectOnTimeout returns a copy of cfg whose clients all dial through one tracker and
// close every connection it made when a request times out. Every client the agent makes must
// come from the copy: a client made from cfg keeps its connection through an outage.
func withReconnectOnTimeout(cfg *rest.Config, log logr.Logger) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	dial := cfg.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: apiDialTimeout, KeepAlive: apiKeepAlive}).DialContext
	}
	conns := &apiConnections{dialer: connrotation.NewDialer(dial), log: log}
	cfg.Dial = conns.dialer.DialContext
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &closeOnTimeout{next: rt, conns: conns} })
	return cfg
}

// apiConnections are the connections of every client made from one configuration.
type apiConnections struct {
	dialer *connrotation.Dialer
	log    logr.Logger

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

// closeOnTimeout closes the connections after a request that timed out.
type closeOnTimeout struct {
	next  http.RoundTripper
	conns *apiConnections
}

func (t *closeOnTimeout) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := time.Now()
	resp, err := t.next.RoundTrip(req)
	switch {
	case err != nil && errors.Is(req.Context().Err(), context.DeadlineExceeded):
		t.conns.closeAll(sent, req, "the request's deadline passed")
	case err == nil && resp.StatusCode == http.StatusGatewayTimeout:
		// After the body, which the caller reads for the apiserver's reason, and which closing
		// the connection now would cut off.
		resp.Body = &afterBody{ReadCloser: resp.Body, then: func() {
			t.conns.closeAll(sent, req, "the apiserver answered 504 Gateway Timeout")
		}}
	}
	return resp, err
}

// afterBody calls then once the body is closed.
type afterBody struct {
	io.ReadCloser
	then func()
}

func (b *afterBody) Close() error {
	err := b.ReadCloser.Close()
	b.then()
	return err
}

// WrappedRoundTripper lets client-go's debugging and connection handling see through the wrapper.
func (t *closeOnTimeout) WrappedRoundTripper() http.RoundTripper { return t.next }
