package framework

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// dialTimeout is the clients' DialTimeout. Connecting itself never blocks in
// the v3.7 client; this bounds the few calls that use it, such as the initial
// keep-alive.
const dialTimeout = 5 * time.Second

// reconnect makes clients retry a refused connection within a fraction of a
// second: gRPC's default backoff grows to minutes, far longer than a member
// takes to restart in a test.
var reconnect = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff: backoff.Config{
		BaseDelay:  50 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   time.Second,
	},
	MinConnectTimeout: 2 * time.Second,
})

func tlsConfig(caPEM []byte, clientCert *keyPair) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in CA PEM")
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if clientCert != nil {
		cert, err := tls.X509KeyPair(clientCert.CertPEM, clientCert.KeyPEM)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// newClient returns an etcd client for endpoints; tlsCfg is nil for plain
// http. The client logs nothing: members are killed on purpose and the
// resulting warnings would bury the test output.
func newClient(endpoints []string, tlsCfg *tls.Config, dialOpts ...grpc.DialOption) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: dialTimeout,
		DialOptions: append([]grpc.DialOption{reconnect}, dialOpts...),
		Logger:      zap.NewNop(),
	}
	if tlsCfg != nil {
		cfg.TLS = tlsCfg.Clone()
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", endpoints, err)
	}
	return cli, nil
}

// testClient is newClient closed at t's cleanup.
func testClient(t TB, endpoints []string, tlsCfg *tls.Config, dialOpts ...grpc.DialOption) *clientv3.Client {
	t.Helper()
	if len(endpoints) == 0 {
		t.Fatalf("no etcd endpoint is running")
	}
	cli, err := newClient(endpoints, tlsCfg, dialOpts...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}
