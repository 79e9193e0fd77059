package etcd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeFile writes data under a fresh directory and returns its path.
func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// selfSignedCA returns a PEM CA certificate that signed nothing.
func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "unrelated CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestLoadCA(t *testing.T) {
	ca := selfSignedCA(t)
	key := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte("not really a key")})
	cases := []struct {
		name string
		data []byte
		// want is in the error; empty means the file loads.
		want string
	}{
		{"a CA", ca, ""},
		{"a bundle of two", append(append([]byte{}, ca...), selfSignedCA(t)...), ""},
		{"a CA after a key", append(append([]byte{}, key...), ca...), ""},
		{"a hostname", []byte("node-1\n"), "holds no PEM certificate"},
		{"empty", nil, "holds no PEM certificate"},
		{"only a key", key, "holds no PEM certificate"},
		{"a broken certificate", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("garbage")}), "certificate 1:"},
	}
	for _, tc := range cases {
		path := writeFile(t, "ca.pem", tc.data)
		_, err := loadCA(path)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want it loaded", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--etcd-cacert "+path)):
			t.Errorf("%s: error %v, want one naming --etcd-cacert %s and saying %q", tc.name, err, path, tc.want)
		}
	}
	if _, err := loadCA(filepath.Join(t.TempDir(), "missing.pem")); err == nil || !strings.Contains(err.Error(), "--etcd-cacert") {
		t.Errorf("a missing file: %v, want an error naming --etcd-cacert", err)
	}
}

// TestNewRefusesCAWithoutCertificate: the check runs where every client is made, the agent's and
// the plugin's alike.
func TestNewRefusesCAWithoutCertificate(t *testing.T) {
	path := writeFile(t, "hostname", []byte("node-1\n"))
	cfg := Config{Endpoints: []string{"https://127.0.0.1:2379"}, CACert: path}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Errorf("New: %v, want a refusal of %s", err, path)
	}
	if err := cfg.CheckTLSFiles(); err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Errorf("CheckTLSFiles: %v, want a refusal of %s", err, path)
	}
}

// TestVerified: a call to an endpoint whose certificate the CA does not verify ends at once with a
// TLSVerificationError naming the endpoint and the CA file; with the right CA, or without TLS, the
// call's own outcome stands.
func TestVerified(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	// The refused handshakes are the point; the server need not log them.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	endpoint := srv.URL
	rightCA := writeFile(t, "right.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	wrongCA := writeFile(t, "wrong.pem", selfSignedCA(t))
	// waits stands for a clientv3 call on a connection that never becomes ready.
	waits := func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}
	call := func(t *testing.T, cfg Config, endpoint string, deadline time.Duration) (time.Duration, error) {
		t.Helper()
		cfg.Endpoints = []string{endpoint}
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		err = c.Verified(ctx, endpoint, waits)
		return time.Since(start), err
	}

	took, err := call(t, Config{CACert: wrongCA}, endpoint, 10*time.Second)
	var verr *TLSVerificationError
	if !errors.As(err, &verr) || took > time.Second {
		t.Fatalf("wrong CA: %v after %s, want a TLSVerificationError at once", err, took)
	}
	for _, want := range []string{"etcd at " + endpoint + ": TLS verification failed", "unknown authority", "--etcd-cacert " + wrongCA + " is not the CA"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("wrong CA: %q does not say %q", err, want)
		}
	}
	if _, err := call(t, Config{}, endpoint, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("without TLS: %v, want the call's own deadline", err)
	}
	if _, err := call(t, Config{CACert: rightCA}, endpoint, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("right CA: %v, want the call's own deadline", err)
	}
	if _, err := call(t, Config{CACert: wrongCA}, strings.Replace(endpoint, "https://", "http://", 1), 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an http endpoint: %v, want the call's own deadline (clientv3 dials it without TLS)", err)
	}
	if _, err := call(t, Config{CACert: wrongCA}, "https://"+strings.TrimPrefix(closedURL(t), "http://"), 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("nothing listening: %v, want the call's own deadline", err)
	}
}

func TestTLSVerificationErrorWithoutCA(t *testing.T) {
	err := &TLSVerificationError{Endpoint: "https://10.0.0.1:2379", Err: x509.UnknownAuthorityError{}}
	if !strings.Contains(err.Error(), "without --etcd-cacert the system's roots are used") {
		t.Errorf("%q does not say that the system's roots were used", err)
	}
}
