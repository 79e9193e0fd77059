package framework

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLSFiles are the PEM files a client needs to reach a TLS cluster. CA also
// signs the members' and the apiserver's serving certificates.
type TLSFiles struct {
	CA         string
	ClientCert string
	ClientKey  string
}

// certValidity is generous for a test yet short enough that a leaked key is
// worthless soon after.
const certValidity = 24 * time.Hour

// authority is a throwaway certificate authority. Every cluster has one, even
// without TLS, because the apiserver always serves HTTPS and authenticates
// clients by certificate.
type authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	file    string
}

func newAuthority(dir string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "etcdmember-framework-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if tmpl.SerialNumber, err = serialNumber(); err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	a := &authority{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		file:    filepath.Join(dir, "ca.crt"),
	}
	if err := os.WriteFile(a.file, a.certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("write CA certificate: %w", err)
	}
	return a, nil
}

// keyPair is an issued certificate with its key, both in memory (for
// kubeconfigs, which embed them) and on disk (for the binaries' flags).
type keyPair struct {
	CertPEM, KeyPEM   []byte
	CertFile, KeyFile string
}

// issueServing signs a certificate valid both as server and as client: etcd
// members present the same certificate when dialling their peers.
func (a *authority) issueServing(dir, name string, ips []net.IP, dnsNames ...string) (*keyPair, error) {
	return a.issue(dir, name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		IPAddresses: ips,
		DNSNames:    dnsNames,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
}

// issueClient signs a client certificate; the apiserver maps CN to the user
// name and O to its groups.
func (a *authority) issueClient(dir, name, user string, groups ...string) (*keyPair, error) {
	return a.issueClientFor(dir, name, certValidity, user, groups...)
}

// issueClientFor is issueClient with a certificate that expires validity from now.
func (a *authority) issueClientFor(dir, name string, validity time.Duration, user string, groups ...string) (*keyPair, error) {
	return a.issue(dir, name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		NotAfter:    time.Now().Add(validity),
	})
}

func (a *authority) issue(dir, name string, tmpl *x509.Certificate) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key for %s: %w", name, err)
	}
	now := time.Now()
	tmpl.NotBefore = now.Add(-time.Hour)
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = now.Add(certValidity)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	if tmpl.SerialNumber, err = serialNumber(); err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %s: %w", name, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key for %s: %w", name, err)
	}
	kp := &keyPair{
		CertPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:   keyPEM,
		CertFile: filepath.Join(dir, name+".crt"),
		KeyFile:  filepath.Join(dir, name+".key"),
	}
	if err := os.WriteFile(kp.CertFile, kp.CertPEM, 0o644); err != nil {
		return nil, fmt.Errorf("write certificate for %s: %w", name, err)
	}
	if err := os.WriteFile(kp.KeyFile, kp.KeyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("write key for %s: %w", name, err)
	}
	return kp, nil
}

// writeSigningKey generates a key pair for signing service account tokens,
// writing the private key to keyPath and the public key, which the apiserver
// needs separately to verify tokens, to pubPath.
func writeSigningKey(keyPath, pubPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("marshal public key: %w", err)
	}
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return fmt.Errorf("write public key: %w", err)
	}
	return nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return n, nil
}
