package main

import (
	"github.com/spf13/pflag"

	"github.com/etcdmember/etcdmember/internal/etcd"
)

// bindEtcdFlags adds the etcd connection flags, with etcdctl's names, that the commands talking
// to etcd directly share.
func bindEtcdFlags(f *pflag.FlagSet, cfg *etcd.Config, endpointsHelp string) {
	f.StringSliceVar(&cfg.Endpoints, "etcd-endpoints", nil, endpointsHelp)
	f.StringVar(&cfg.CACert, "etcd-cacert", "", "CA bundle to verify etcd's serving certificates.")
	f.StringVar(&cfg.Cert, "etcd-cert", "", "Client certificate for etcd.")
	f.StringVar(&cfg.Key, "etcd-key", "", "Client key for etcd.")
}
