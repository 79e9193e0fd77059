// Package kubeadm is the kubeadm tier of the test bed: control-plane nodes that kubeadm v1.37
// itself initializes, joins, upgrades and resets, each on node namespaces of the node tier
// (test/framework), with etcd and the control plane as kubeadm's static pods under real kubelets.
// The harness only does what a machine's init system would: it starts containerd and the kubelet.
package kubeadm

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"text/template"
)

// Preflight checks that cannot hold on the machines the tier runs on. kubeadm still runs an
// ignored check and prints its finding as a warning; the tier ignores these by name, never "all",
// so that any other check that fails stops init or join as it would stop an operator.
var ignoredPreflightChecks = []preflightException{
	{"SystemVerification", "the machines run cgroup v1, which kubelet 1.35+ refuses unless told otherwise; the kubelet runs with failCgroupV1: false, as KUBELET-NOTES requires"},
	{"Service-kubelet", "systemctl is installed (Debian's systemd, for systemd-analyze) but systemd is not PID 1: the harness starts and stops each kubelet, as an init system would"},
}

type preflightException struct{ Name, Why string }

// Settings are what every node's kubeadm configuration shares.
type Settings struct {
	// KubernetesVersion is the version kubeadm deploys and the control plane images' tag.
	KubernetesVersion string
	// EtcdImageTag is the tag of registry.k8s.io/etcd that kubeadm deploys (kubeadm's form,
	// "3.7.3-0"): the oldest the tier built, which its etcd upgrade moves from.
	EtcdImageTag string
	// Endpoint is controlPlaneEndpoint, host:port: a join --control-plane requires one.
	Endpoint string
	// ServiceSubnet holds the kubernetes Service's ClusterIP.
	ServiceSubnet string
	// Token is the bootstrap token the joins discover the cluster with.
	Token string
	// CertificateKey encrypts the control plane's certificates that init uploads (--upload-certs)
	// and each control-plane join downloads.
	CertificateKey string
}

// InitConfig is the configuration of `kubeadm init --upload-certs --config` on the first node:
// stacked etcd, no kube-proxy (the node tier runs its own, whose image would need nftables'
// libraries) and no CoreDNS (nothing in the tier resolves names), and the kubelet settings the
// machines require, in kubeadm's KubeletConfiguration as an operator would give them.
func InitConfig(c Settings, n *Node) (string, error) {
	return render(initTemplate, c, n, "")
}

// JoinConfig is the configuration of `kubeadm join --config` for a further control-plane node.
// caCertHash pins the cluster CA the node discovers, as `kubeadm token create
// --print-join-command` prints it (CACertHash).
func JoinConfig(c Settings, n *Node, caCertHash string) (string, error) {
	if caCertHash == "" {
		return "", errors.New("kubeadm join config: no CA certificate hash")
	}
	return render(joinTemplate, c, n, caCertHash)
}

// CACertHash is the discovery pin of a CA certificate in PEM: sha256 over its public key info.
func CACertHash(caPEM []byte) (string, error) {
	block, _ := pem.Decode(caPEM)
	if block == nil {
		return "", errors.New("CA certificate: no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("CA certificate: %w", err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

func render(tmpl *template.Template, c Settings, n *Node, caCertHash string) (string, error) {
	var b bytes.Buffer
	err := tmpl.Execute(&b, struct {
		Settings
		Node       *Node
		CRISocket  string
		CACertHash string
		Ignored    []preflightException
	}{c, n, criSocket, caCertHash, ignoredPreflightChecks})
	if err != nil {
		return "", fmt.Errorf("kubeadm config of %s: %w", n.Name, err)
	}
	return b.String(), nil
}

// nodeRegistration is shared by init and join: the node's name (it differs from the machine's
// hostname, so kubeadm passes --hostname-override), its containerd, and images never pulled,
// since the tier imports them and no registry is reachable.
const nodeRegistration = `nodeRegistration:
  name: {{ .Node.Name }}
  criSocket: {{ .CRISocket }}
  imagePullPolicy: Never
  kubeletExtraArgs:
  - name: node-ip
    value: {{ .Node.IP }}
  ignorePreflightErrors:
{{- range .Ignored }}
  # {{ .Why }}
  - {{ .Name }}
{{- end }}
`

var initTemplate = template.Must(template.New("init").Parse(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: {{ .Token }}
  ttl: 2h0m0s
certificateKey: {{ .CertificateKey }}
localAPIEndpoint:
  advertiseAddress: {{ .Node.IP }}
  bindPort: 6443
` + nodeRegistration + `skipPhases:
- addon/coredns
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: {{ .KubernetesVersion }}
clusterName: etcdmember
controlPlaneEndpoint: {{ .Endpoint }}
networking:
  serviceSubnet: {{ .ServiceSubnet }}
etcd:
  local:
    imageTag: {{ .EtcdImageTag }}
proxy:
  disabled: true
---
# What the machines require of a kubelet (KUBELET-NOTES): cgroup v1 and swap allowed, cgroupfs,
# no iptables chains of its own (one drops non-local traffic to 127.0.0.0/8), no image garbage
# collection (imported images cannot be pulled again), eviction only on a full disk, and the
# flex-volume directory under /var/lib/kubelet instead of the host's /usr. kubeadm keeps what it
# is given here and stores it in the kubelet-config ConfigMap, which every join reads.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
makeIPTablesUtilChains: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
volumePluginDir: /var/lib/kubelet/volume-plugins
fileCheckFrequency: 1s
`))

var joinTemplate = template.Must(template.New("join").Parse(`apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: {{ .Endpoint }}
    token: {{ .Token }}
    caCertHashes:
    - {{ .CACertHash }}
controlPlane:
  certificateKey: {{ .CertificateKey }}
  localAPIEndpoint:
    advertiseAddress: {{ .Node.IP }}
    bindPort: 6443
` + nodeRegistration))
