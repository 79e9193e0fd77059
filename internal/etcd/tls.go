package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"

	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// CheckTLSFiles loads the TLS files as New does, so that a command refuses bad ones before it
// contacts anything.
func (c Config) CheckTLSFiles() error {
	_, err := c.tlsConfig()
	return err
}

func (c Config) tlsConfig() (*tls.Config, error) {
	if c.CACert == "" && c.Cert == "" && c.Key == "" {
		return nil, nil
	}
	if (c.Cert == "") != (c.Key == "") {
		return nil, errors.New("--etcd-cert and --etcd-key go together")
	}
	info := transport.TLSInfo{CertFile: c.Cert, KeyFile: c.Key}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading etcd TLS files: %w", err)
	}
	if c.CACert != "" {
		if cfg.RootCAs, err = loadCA(c.CACert); err != nil {
			return nil, fmt.Errorf("loading etcd TLS files: %w", err)
		}
	}
	return cfg, nil
}

// loadCA reads the --etcd-cacert bundle. etcd's transport package turns a file without any PEM
// certificate into an empty pool, which verifies nothing: every handshake then fails, and
// clientv3 retries until the call's deadline says only "context deadline exceeded". Blocks of
// other types (a key passed by mistake) are skipped, as x509.CertPool.AppendCertsFromPEM does.
func loadCA(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--etcd-cacert: %w", err)
	}
	pool := x509.NewCertPool()
	found := 0
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cacert %s, certificate %d: %w", path, found+1, err)
		}
		pool.AddCert(cert)
		found++
	}
	if found == 0 {
		return nil, fmt.Errorf("--etcd-cacert %s holds no PEM certificate: it must be the CA bundle that signed etcd's serving certificates", path)
	}
	return pool, nil
}

// TLSVerificationError is an etcd endpoint whose serving certificate did not verify.
type TLSVerificationError struct {
	Endpoint string
	// CACert is the --etcd-cacert file the certificate was verified against; empty means the
	// system's roots.
	CACert string
	Err    error
}

func (e *TLSVerificationError) Error() string {
	msg := fmt.Sprintf("etcd at %s: TLS verification failed: %v", e.Endpoint, e.Err)
	var unknown x509.UnknownAuthorityError
	switch {
	case !errors.As(e.Err, &unknown):
	case e.CACert == "":
		msg += "; without --etcd-cacert the system's roots are used: pass the CA that signed etcd's serving certificate"
	default:
		msg += fmt.Sprintf("; --etcd-cacert %s is not the CA that signed etcd's serving certificate", e.CACert)
	}
	return msg
}

func (e *TLSVerificationError) Unwrap() error { return e.Err }

// Verified runs call, a call to endpoint, and next to it one TLS handshake with endpoint, made as
// the client's connections make it. gRPC retries a handshake whose certificate does not verify
// without saying so, and clientv3 reports only the call's deadline in the end. So when the
// handshake finds that, call's context ends at once and the *TLSVerificationError is returned
// instead of call's error. Without TLS, or for an endpoint that is not https://host:port, call
// runs alone.
func (c *Client) Verified(ctx context.Context, endpoint string, call func(context.Context) error) error {
	addr, ok := tlsAddress(endpoint)
	if c.tls == nil || !ok {
		return call(ctx)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		if err := c.verifyServing(ctx, endpoint, addr); err != nil {
			cancel(err)
		}
	}()
	err := call(ctx)
	var verr *TLSVerificationError
	if err != nil && errors.As(context.Cause(ctx), &verr) {
		return verr
	}
	return err
}

// verifyServing returns a *TLSVerificationError when the certificate endpoint serves does not
// verify, and nil for any other outcome: a connection that fails for another reason is for the
// call itself to report.
func (c *Client) verifyServing(ctx context.Context, endpoint, addr string) error {
	cfg := c.tls.Clone()
	if cfg.ServerName == "" {
		// As gRPC does: the certificate must cover the host the endpoint names.
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	if err == nil {
		_ = conn.Close()
		return nil
	}
	var verr *tls.CertificateVerificationError
	if !errors.As(err, &verr) {
		return nil
	}
	return &TLSVerificationError{Endpoint: endpoint, CACert: c.cfg.CACert, Err: verr}
}

// tlsAddress is the host:port of an https endpoint. clientv3 dials http endpoints without TLS,
// whatever the TLS settings.
func tlsAddress(endpoint string) (string, bool) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "https" || u.Port() == "" {
		return "", false
	}
	return u.Host, true
}
