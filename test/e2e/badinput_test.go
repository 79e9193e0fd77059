package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// notInstalled is what the plugin and the agent say when the CRD is missing, and installHint the
// command they name to fix it.
const (
	notInstalled = "the EtcdMember CRD (etcdmembers.etcdmember.io) is not installed"
	installHint  = "kubectl apply -k config/default"
)

// TestWithoutCRD: the most common first mistake, etcdmember run before `kubectl apply -k
// config/default`. Every plugin command that reads objects says the CRD is missing and how to
// install it, with exit code 1; the agent says so in its log and through readiness, and registers
// its member once the CRD is applied, without a restart.
func TestWithoutCRD(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 1})
	api := framework.StartAPIServer(t, c)
	m := c.Members()[0]

	for _, args := range [][]string{
		{"list"},
		{"list", "-o", "json"},
		{"leave", m.Name, "--wait=false"},
		{"prune-stale", "--dry-run"},
	} {
		run := api.Plugin(t, nil, nil, args...)
		if run.Code != exitError || !strings.Contains(run.Stderr, notInstalled) || !strings.Contains(run.Stderr, installHint) ||
			strings.Contains(run.Stderr, "no matches for") {
			t.Errorf("kubectl etcdmember %s without the CRD: %s\nwant exit %d and %q with %q, not discovery's raw error",
				strings.Join(args, " "), run.Output(), exitError, notInstalled, installHint)
		}
	}

	// The agent runs with the credential an operator gives it, which config/default's RBAC binds
	// once applied.
	_, kubeconfig := api.User(t, "etcdmember-agent", "etcdmember:agents")
	agent := framework.NewAgent(t, m, api, "--kubeconfig="+kubeconfig)
	agent.StartUnready(t)
	waitLogContains(t, agent, notInstalled, installHint)
	readyz, check := agent.HealthURL("readyz"), agent.HealthURL("readyz/crd-installed")
	if code, body := httpGet(t, readyz); code == http.StatusOK || !strings.Contains(body, "[-]crd-installed failed") {
		t.Errorf("/readyz without the CRD: %d %q; want a failure of the crd-installed check", code, body)
	}
	if code, body := httpGet(t, check); code == http.StatusOK || !strings.Contains(body, notInstalled) || !strings.Contains(body, installHint) {
		t.Errorf("/readyz/crd-installed without the CRD: %d %q; want a failure saying %q and %q", code, body, notInstalled, installHint)
	}

	api.InstallEtcdmember(t)
	agent.WaitReady(t)
	if code, body := httpGet(t, check); code != http.StatusOK {
		t.Errorf("/readyz/crd-installed once the CRD is applied: %d %q; want 200", code, body)
	}
	obj := api.Plugin(t, nil, nil, "list", "-o", "jsonpath={.items[*].status.memberID}")
	if obj.Code != 0 || strings.TrimSpace(obj.Stdout) != m.IDHex() {
		t.Errorf("list once the agent is ready: %s\nwant the member ID %s", obj.Output(), m.IDHex())
	}
}

// TestBadEtcdCAFile: an --etcd-cacert that cannot verify etcd. A file with no PEM certificate is
// refused at once, by the plugin and by the agent, naming the file and the flag, instead of a wait
// for the deadline that ends in "context deadline exceeded". A real CA that did not sign etcd's
// serving certificate is named a TLS verification failure of that endpoint, not an etcd that did
// not answer.
func TestBadEtcdCAFile(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 1, tls: true, agents: []string{}})
	files := e.cluster.TLS()
	endpoint := e.cluster.Endpoints()[0]
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "hostname")
	if err := os.WriteFile(notPEM, []byte("node-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	foreign := writeForeignCA(t, dir)
	etcdFlags := func(ca string) []string {
		return []string{"--etcd-endpoints", endpoint, "--etcd-cacert", ca, "--etcd-cert", files.ClientCert, "--etcd-key", files.ClientKey}
	}
	// --timeout is the deadline the old code waited out; "at once" is well under it.
	const timeout, atOnce = 20 * time.Second, 5 * time.Second

	ok := e.plugin(append([]string{"list", "--timeout", timeout.String()}, etcdFlags(files.CA)...)...)
	if ok.Code != 0 {
		t.Fatalf("list with the right CA: %s", ok.Output())
	}

	notPEMMsg := "--etcd-cacert " + notPEM + " holds no PEM certificate"
	run := e.plugin(append([]string{"list", "--timeout", timeout.String()}, etcdFlags(notPEM)...)...)
	if run.Code != exitError || !strings.Contains(run.Stderr, notPEMMsg) || run.Took > atOnce {
		t.Errorf("list with a CA file that holds no certificate: %s\nwant exit %d within %s saying %q", run.Output(), exitError, atOnce, notPEMMsg)
	}

	start := time.Now()
	out, code := runAgentCLI(t, "serve", "--kubeconfig", e.agentKubeconfig, "--etcd-endpoints", endpoint,
		"--etcd-cacert", notPEM, "--etcd-cert", files.ClientCert, "--etcd-key", files.ClientKey,
		"--etcd-wait-timeout", timeout.String(), "--health-probe-bind-address", "0", "--metrics-bind-address", "0")
	if took := time.Since(start); code == 0 || !strings.Contains(out, notPEMMsg) || took > atOnce {
		t.Errorf("serve with a CA file that holds no certificate: exit %d after %s, output %q; want a non-zero exit within %s saying %q",
			code, took.Round(time.Millisecond), out, atOnce, notPEMMsg)
	}

	run = e.plugin(append([]string{"list", "--timeout", timeout.String()}, etcdFlags(foreign)...)...)
	for _, want := range []string{"etcd at " + endpoint + ": TLS verification failed", "unknown authority", "--etcd-cacert " + foreign} {
		if run.Code != exitError || !strings.Contains(run.Stderr, want) || strings.Contains(run.Stderr, "did not answer") {
			t.Errorf("list with a CA that did not sign etcd's certificate: %s\nwant exit %d saying %q, not that etcd did not answer", run.Output(), exitError, want)
		}
	}

	// The agent waits for its etcd, which may start after it, but says why each attempt failed.
	out, code = runAgentCLI(t, "serve", "--kubeconfig", e.agentKubeconfig, "--etcd-endpoints", endpoint,
		"--etcd-cacert", foreign, "--etcd-cert", files.ClientCert, "--etcd-key", files.ClientKey,
		"--etcd-wait-timeout", "3s", "--health-probe-bind-address", "0", "--metrics-bind-address", "0")
	if want := "etcd at " + endpoint + ": TLS verification failed"; code == 0 || !strings.Contains(out, want) ||
		strings.Contains(out, "context deadline exceeded") || strings.Contains(out, "did not answer") {
		t.Errorf("serve with a CA that did not sign etcd's certificate: exit %d, output %q; want a non-zero exit saying %q, never a deadline nor that etcd did not answer",
			code, out, want)
	}
}

// writeForeignCA writes a CA certificate that signed nothing the test bed serves, and returns its
// path.
func writeForeignCA(t *testing.T, dir string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "some other CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "other-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
