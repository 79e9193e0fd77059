package kubeadm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// TestConfigsValidate hands the tier's init and join configurations to kubeadm's own validation,
// which decodes them strictly: a field kubeadm does not know, or a value it refuses, fails here
// rather than in the middle of a cluster's creation.
func TestConfigsValidate(t *testing.T) {
	kubeadm := framework.Binary(t, "kubeadm")
	c := Settings{
		KubernetesVersion: "v1.37.2",
		EtcdImageTag:      "3.7.3-0",
		Endpoint:          "172.29.0.2:6443",
		ServiceSubnet:     "10.96.0.0/24",
		Token:             "abcdef.0123456789abcdef",
		CertificateKey:    strings.Repeat("0a", 32),
	}
	n := &Node{Name: "cp-1", IP: "172.29.0.2"}
	initConfig, err := InitConfig(c, n)
	if err != nil {
		t.Fatal(err)
	}
	joinConfig, err := JoinConfig(c, &Node{Name: "cp-2", IP: "172.29.0.3"},
		"sha256:"+strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	for name, config := range map[string]string{"init": initConfig, "join": joinConfig} {
		path := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(kubeadm, "config", "validate", "--config", path).CombinedOutput()
		if err != nil {
			t.Errorf("kubeadm config validate of the %s configuration: %v\n%s\n--- the configuration:\n%s", name, err, out, config)
		}
	}

	broken := strings.Replace(initConfig, "failSwapOn:", "failSwapOnn:", 1)
	path := filepath.Join(t.TempDir(), "broken.yaml")
	if err := os.WriteFile(path, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(kubeadm, "config", "validate", "--config", path).CombinedOutput(); err == nil {
		t.Errorf("kubeadm config validate accepted an unknown KubeletConfiguration field, so it proves nothing about ours:\n%s", out)
	}
}
