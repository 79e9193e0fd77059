package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
)

// testCA signs client certificates named by their CN.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

// client returns a client certificate and key for cn, as PEM.
func (ca *testCA) client(t *testing.T, cn string) ([]byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// kubeconfigCert stands for the certificate a kubeconfig file holds, which an operator renews.
type kubeconfigCert struct {
	mu              sync.Mutex
	certPEM, keyPEM []byte
	err             error
}

func (k *kubeconfigCert) set(certPEM, keyPEM []byte, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.certPEM, k.keyPEM, k.err = certPEM, keyPEM, err
}

func (k *kubeconfigCert) load() ([]byte, []byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.certPEM, k.keyPEM, k.err
}

// TestRenewedClientCertificate: the agent presents a renewed kubeconfig certificate once its
// connections close, closes them when a recheck, an Unauthorized or a Forbidden answer finds it
// renewed, and keeps the last good one while the kubeconfig cannot be read.
func TestRenewedClientCertificate(t *testing.T) {
	ca := newTestCA(t)
	var mu sync.Mutex
	// rejected answers a certificate's CN with a status: 401 for an expired one, 403 for one in
	// the wrong group.
	rejected := map[string]int{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := r.TLS.PeerCertificates[0].Subject.CommonName
		mu.Lock()
		defer mu.Unlock()
		if status := rejected[cn]; status != 0 {
			w.WriteHeader(status)
		}
		_, _ = io.WriteString(w, cn)
	}))
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)

	first, firstKey := ca.client(t, "first")
	kc := &kubeconfigCert{}
	kc.set(first, firstKey, nil)
	serverCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	cfg, conns, err := apiConfig(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: serverCA, CertData: first, KeyData: firstKey,
	}}, kc.load, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	presents := func(want string, status int, after string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("after %s: %v", after, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if string(body) != want || resp.StatusCode != status {
			t.Fatalf("after %s: the server saw %q and answered %d, want %q and %d", after, body, resp.StatusCode, want, status)
		}
	}
	presents("first", http.StatusOK, "the start")

	second, secondKey := ca.client(t, "second")
	kc.set(second, secondKey, nil)
	presents("first", http.StatusOK, "a renewal, on the connection open before it")
	conns.recheckCertificate("test")
	presents("second", http.StatusOK, "a recheck")

	// The kubeconfig half written: the last good certificate stays.
	kc.set(nil, nil, errors.New("unexpected EOF"))
	conns.dialer.CloseAll()
	presents("second", http.StatusOK, "a kubeconfig that cannot be read")

	// The certificate in use refused before any recheck saw the renewal: the answer makes the
	// next request connect again with the new one.
	refusedThenRenewed := func(inUse, renewed string, status int, why string) {
		t.Helper()
		certPEM, keyPEM := ca.client(t, renewed)
		kc.set(certPEM, keyPEM, nil)
		mu.Lock()
		rejected[inUse] = status
		mu.Unlock()
		presents(inUse, status, why)
		presents(renewed, http.StatusOK, why+", answered "+http.StatusText(status))
	}
	refusedThenRenewed("second", "third", http.StatusUnauthorized, "the certificate in use expired")
	refusedThenRenewed("third", "fourth", http.StatusForbidden, "the certificate in use in the wrong group")
}

// TestRenewalSeenByHandshakeFirst: a renewal a new connection's handshake read first is still
// reported by the next successful recheck, once, since the connections opened before it present
// the old certificate.
func TestRenewalSeenByHandshakeFirst(t *testing.T) {
	ca := newTestCA(t)
	kc := &kubeconfigCert{}
	first, firstKey := ca.client(t, "first")
	kc.set(first, firstKey, nil)
	c := &clientCertificate{load: kc.load}
	if changed, err := c.reload(); err != nil || changed {
		t.Fatalf("the first read: changed %v, %v; want false, nil", changed, err)
	}
	second, secondKey := ca.client(t, "second")
	kc.set(second, secondKey, nil)
	if got, err := c.get(nil); err != nil || got.Leaf.Subject.CommonName != "second" {
		t.Fatalf("the handshake presented %v, %v; want the renewed certificate", got, err)
	}
	kc.set(nil, nil, errors.New("unexpected EOF"))
	if _, err := c.reload(); err == nil {
		t.Fatal("a recheck of an unreadable kubeconfig succeeded")
	}
	kc.set(second, secondKey, nil)
	if changed, err := c.reload(); err != nil || !changed {
		t.Fatalf("the recheck after the handshake: changed %v, %v; want true, nil", changed, err)
	}
	if changed, err := c.reload(); err != nil || changed {
		t.Fatalf("the recheck after that: changed %v, %v; want false, nil", changed, err)
	}
}
