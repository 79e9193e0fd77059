package agent

import (
	"context"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"

	"github.com/etcdmember/kubectl-etcdmember/internal/metrics"
)

// apiBackend is an HTTP/2 server over TLS, as an apiserver is, that counts the connections
// clients open to it, and a client of it made the way the agent makes its API clients. /hang
// answers only once the request is given up on, /504 answers 504 with a body, anything else 200.
type apiBackend struct {
	srv    *httptest.Server
	opened atomic.Int32
	c      *http.Client
	conns  *apiConnections
	// held counts the requests to /held; the first waits there until it is given up on, and
	// says so on arrived.
	held    atomic.Int32
	arrived chan struct{}
	// reconnects is etcdmember_api_reconnects_total before the test.
	reconnects float64
}

const gatewayTimeoutBody = "the server was unable to return a response in the time allotted"

// newAPIBackend starts the server and returns once the client has one connection open to it.
func newAPIBackend(t *testing.T) *apiBackend {
	t.Helper()
	b := &apiBackend{reconnects: testutil.ToFloat64(metrics.APIReconnects), arrived: make(chan struct{}, 1)}
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang":
			<-r.Context().Done()
		case "/held":
			if b.held.Add(1) == 1 {
				b.arrived <- struct{}{}
				<-r.Context().Done()
				return
			}
			_, _ = io.WriteString(w, "ok")
		case "/504":
			w.WriteHeader(http.StatusGatewayTimeout)
			_, _ = io.WriteString(w, gatewayTimeoutBody)
		default:
			_, _ = io.WriteString(w, "ok")
		}
	}))
	b.srv.EnableHTTP2 = true
	b.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			b.opened.Add(1)
		}
	}
	b.srv.StartTLS()
	t.Cleanup(b.srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.srv.Certificate().Raw})
	cfg, conns, err := apiConfig(&rest.Config{Host: b.srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}, nil, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	b.conns = conns
	if b.c, err = rest.HTTPClientFor(cfg); err != nil {
		t.Fatal(err)
	}
	b.mustGet(t, "/")
	return b
}

func (b *apiBackend) get(ctx context.Context, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.srv.URL+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := b.c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// mustGet sends a request that must succeed.
func (b *apiBackend) mustGet(t *testing.T, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, body, err := b.get(ctx, path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return body
}

// want checks how many connections the client opened, and how far
// etcdmember_api_reconnects_total rose, in all.
func (b *apiBackend) want(t *testing.T, conns int32, reconnects float64, after string) {
	t.Helper()
	b.mustGet(t, "/")
	if got := b.opened.Load(); got != conns {
		t.Errorf("%d connections opened after %s, want %d", got, after, conns)
	}
	if got := testutil.ToFloat64(metrics.APIReconnects) - b.reconnects; got != reconnects {
		t.Errorf("etcdmember_api_reconnects_total rose by %v after %s, want %v", got, after, reconnects)
	}
}

func TestReconnectOnTimeout(t *testing.T) {
	b := newAPIBackend(t)
	b.want(t, 1, 0, "two requests")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, _, err := b.get(ctx, "/hang"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GET /hang: %v, want the deadline exceeded", err)
	}
	b.want(t, 2, 1, "a request that timed out")
}

// TestUnboundedRequestTimesOut: a request sent without a deadline (an informer's list) gets one,
// and its timeout reconnects as any other's; a watch keeps none.
func TestUnboundedRequestTimesOut(t *testing.T) {
	b := newAPIBackend(t)
	b.c.Transport.(*reconnecting).unbounded = 200 * time.Millisecond
	start := time.Now()
	if _, _, err := b.get(context.Background(), "/hang"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GET /hang without a deadline: %v, want the deadline exceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("GET /hang without a deadline took %s", took)
	}
	b.want(t, 2, 1, "a request without a deadline that got none")

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	if _, _, err := b.get(ctx, "/hang?watch=true"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a watch: %v, want it open until its caller cancelled it", err)
	}
	b.want(t, 2, 1, "a watch its caller cancelled")
}

func TestReconnectAfter504(t *testing.T) {
	b := newAPIBackend(t)
	// The caller still reads the apiserver's reason.
	if body := b.mustGet(t, "/504"); body != gatewayTimeoutBody {
		t.Fatalf("504's body: %q, want %q", body, gatewayTimeoutBody)
	}
	b.want(t, 2, 1, "a 504")
}

// Requests that time out together close the connections once: a request sent before the last
// close says nothing about the connections opened since.
func TestReconnectOncePerTimeout(t *testing.T) {
	b := newAPIBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	errs := make(chan error, 3)
	for range cap(errs) {
		go func() {
			_, _, err := b.get(ctx, "/hang")
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err == nil {
			t.Fatal("GET /hang answered")
		}
	}
	b.want(t, 2, 1, "three requests timed out together")

	// The same rule on its own, without the race of the requests above.
	conns := &apiConnections{dialer: connrotation.NewDialer((&net.Dialer{}).DialContext), log: logr.Discard()}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	before := time.Now()
	conns.closeAll(before, req, "first")
	conns.closeAll(before, req, "sent before the first close")
	if got := testutil.ToFloat64(metrics.APIReconnects) - b.reconnects; got != 2 {
		t.Errorf("etcdmember_api_reconnects_total rose by %v after two timeouts of requests sent before one close, want 2 in all", got)
	}
	conns.closeAll(time.Now(), req, "sent after it")
	if got := testutil.ToFloat64(metrics.APIReconnects) - b.reconnects; got != 3 {
		t.Errorf("etcdmember_api_reconnects_total rose by %v after a third timeout, of a request sent after the close, want 3 in all", got)
	}
}

// A request its caller gives up on says nothing about the apiserver.
func TestNoReconnectOnCancel(t *testing.T) {
	b := newAPIBackend(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, _, err := b.get(ctx, "/hang"); !errors.Is(err, context.Canceled) {
		t.Fatalf("GET /hang: %v, want it canceled", err)
	}
	b.want(t, 1, 0, "a canceled request")
}

// TestReadSentAgainAfterClose: a read in flight when the agent closes its connections is sent
// again at once, on a new one; a write is not, since the apiserver may have applied it.
func TestReadSentAgainAfterClose(t *testing.T) {
	for _, tc := range []struct {
		method  string
		arrives int32
	}{{http.MethodGet, 2}, {http.MethodPut, 1}} {
		t.Run(tc.method, func(t *testing.T) {
			b := newAPIBackend(t)
			go func() {
				<-b.arrived
				b.conns.dialer.CloseAll()
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, tc.method, b.srv.URL+"/held", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			if tc.method == http.MethodGet {
				req.Body, req.GetBody, req.ContentLength = nil, nil, 0
			}
			resp, err := b.c.Do(req)
			if resp != nil {
				_ = resp.Body.Close()
			}
			if got := b.held.Load(); got != tc.arrives {
				t.Errorf("the server saw the %s %d times, want %d", tc.method, got, tc.arrives)
			}
			if (err == nil) != (tc.arrives == 2) {
				t.Errorf("the %s: error %v", tc.method, err)
			}
		})
	}
}
