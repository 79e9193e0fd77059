package cmd

import (
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// bindEtcdFlags adds the etcd connection flags. Their defaults come from etcdctl's environment
// variables, so an operator on a control-plane node with etcdctl set up needs no flags.
func bindEtcdFlags(f *pflag.FlagSet, cfg *etcd.Config, endpointsHelp string) {
	var endpoints []string
	if v := os.Getenv("ETCDCTL_ENDPOINTS"); v != "" {
		endpoints = strings.Split(v, ",")
	}
	f.StringSliceVar(&cfg.Endpoints, "etcd-endpoints", endpoints, endpointsHelp+" Default: $ETCDCTL_ENDPOINTS.")
	f.StringVar(&cfg.CACert, "etcd-cacert", os.Getenv("ETCDCTL_CACERT"), "CA bundle to verify etcd's serving certificates. Default: $ETCDCTL_CACERT.")
	f.StringVar(&cfg.Cert, "etcd-cert", os.Getenv("ETCDCTL_CERT"), "Client certificate for etcd. Default: $ETCDCTL_CERT.")
	f.StringVar(&cfg.Key, "etcd-key", os.Getenv("ETCDCTL_KEY"), "Client key for etcd. Default: $ETCDCTL_KEY.")
}
