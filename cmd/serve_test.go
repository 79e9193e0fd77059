package cmd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// TestConnectionFlagsSet: any of kubectl's connection flags on the command line makes the agent use
// them; the agent's own flags do not, so that in a pod it takes its ServiceAccount.
func TestConnectionFlagsSet(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--etcd-endpoints=https://10.0.0.1:2379", "--name=node-1"}, false},
		{[]string{"--kubeconfig=/etc/etcdmember/kubeconfig"}, true},
		{[]string{"--server=https://10.0.0.1:6443"}, true},
		{[]string{"--context=admin"}, true},
	} {
		flags := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		genericclioptions.NewConfigFlags(true).AddFlags(flags)
		flags.String("etcd-endpoints", "", "")
		flags.String("name", "", "")
		if err := flags.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := connectionFlagsSet(flags); got != tc.want {
			t.Errorf("%v: connectionFlagsSet = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestAgentCertificate: the agent reads its kubeconfig's certificate anew at each call, embedded
// or in files named relative to the kubeconfig, for the user of the current context or of
// --context.
func TestAgentCertificate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	write := func(user string, auth *clientcmdapi.AuthInfo) {
		t.Helper()
		kc := clientcmdapi.NewConfig()
		kc.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://10.0.0.1:6443"}
		kc.AuthInfos[user] = auth
		kc.AuthInfos["other"] = &clientcmdapi.AuthInfo{ClientCertificateData: []byte("other"), ClientKeyData: []byte("other key")}
		kc.Contexts["agent"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: user}
		kc.Contexts["other"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "other"}
		kc.CurrentContext = "agent"
		if err := clientcmd.WriteToFile(*kc, path); err != nil {
			t.Fatal(err)
		}
	}
	config := genericclioptions.NewConfigFlags(true)
	config.KubeConfig = &path
	read := agentCertificate(config)
	want := func(cert, key, after string) {
		t.Helper()
		c, k, err := read()
		if err != nil || string(c) != cert || string(k) != key {
			t.Fatalf("after %s: %q, %q, %v; want %q, %q", after, c, k, err, cert, key)
		}
	}

	write("agent", &clientcmdapi.AuthInfo{ClientCertificateData: []byte("first"), ClientKeyData: []byte("first key")})
	want("first", "first key", "the first kubeconfig")
	write("agent", &clientcmdapi.AuthInfo{ClientCertificateData: []byte("second"), ClientKeyData: []byte("second key")})
	want("second", "second key", "a renewal")
	for name, data := range map[string]string{"agent.crt": "in a file", "agent.key": "its key"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("agent", &clientcmdapi.AuthInfo{ClientCertificate: "agent.crt", ClientKey: "agent.key"})
	want("in a file", "its key", "a kubeconfig naming files")
	write("agent", &clientcmdapi.AuthInfo{ClientCertificateData: []byte("embedded"), ClientKey: "agent.key"})
	want("embedded", "its key", "a kubeconfig embedding the certificate and naming the key's file")

	other := "other"
	config.Context = &other
	want("other", "other key", "--context")
}
