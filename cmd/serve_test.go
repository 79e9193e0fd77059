package cmd

import (
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
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
