package framework

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// firstAddress is the first host address of a Service range, which the apiserver gives the
// "kubernetes" Service.
func firstAddress(cidr string) (net.IP, error) {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil, err
	}
	ip := slices.Clone(n.IP.To4())
	if ip == nil {
		return nil, fmt.Errorf("%s: IPv4 only", cidr)
	}
	ip[3]++
	return ip, nil
}

const (
	apiserverPort = 6443
	// apiserverReadyTimeout is generous because the apiserver runs dozens of
	// post-start hooks, and on 2 cores it competes with etcd and the tests.
	apiserverReadyTimeout = 60 * time.Second
	serviceCIDR           = "10.0.0.0/24"
)

// APIServer is a real kube-apiserver storing its data in a Cluster.
type APIServer struct {
	c     *Cluster
	dir   string
	ip    string
	bin   string
	args  []string
	proc  *process
	admin *rest.Config

	kubeconfig string
	clientset  kubernetes.Interface
	users      atomic.Int32 // numbers the files of Restricted credentials
	// etcdLinks stand between the apiserver and each member in a FaultProxies cluster.
	etcdLinks map[*Member]*Link
	cfg       APIServerConfig
	saKey     string
}

// APIServerConfig sets what the node tier needs of an apiserver and the other tiers do not.
type APIServerConfig struct {
	// IP is the address to serve on instead of a fresh loopback one; a non-loopback one is also
	// published as the endpoint of the "kubernetes" Service, which in-cluster clients dial.
	IP string
	// ServiceCIDR is the Service range, 10.0.0.0/24 when empty; its first address is in the
	// serving certificate.
	ServiceCIDR string
	// Nodes authorizes kubelets as Kubernetes does (Node,RBAC and the NodeRestriction admission).
	Nodes bool
	// Storage lists the members the apiserver stores through, all of the cluster's when empty.
	// kubeadm gives each apiserver its own node's member only, so that apiserver stops serving
	// whenever that member does.
	Storage []*Member
}

// StartAPIServer starts kube-apiserver on its own loopback address, storing in
// c through all of its members' client URLs (with c's client certificate when
// c uses TLS), with RBAC authorization and client-certificate authentication
// against c's CA. It returns once /readyz is ok and the "default" namespace
// exists. The process is killed at t's cleanup. In a FaultProxies cluster it reaches each member
// through a link of its own (EtcdLink), never through the members' client links.
func StartAPIServer(t TB, c *Cluster) *APIServer {
	t.Helper()
	return StartAPIServerWith(t, c, APIServerConfig{})
}

// StartAPIServerWith is StartAPIServer with the settings of cfg.
func StartAPIServerWith(t TB, c *Cluster, cfg APIServerConfig) *APIServer {
	t.Helper()
	if cfg.ServiceCIDR == "" {
		cfg.ServiceCIDR = serviceCIDR
	}
	a := &APIServer{c: c, dir: t.TempDir(), bin: Binary(t, "kube-apiserver"), cfg: cfg, ip: cfg.IP}
	var err error
	if a.ip == "" {
		if a.ip, err = allocateIP(apiserverPort); err != nil {
			t.Fatalf("apiserver address: %v", err)
		}
	}
	firstService, err := firstAddress(cfg.ServiceCIDR)
	if err != nil {
		t.Fatalf("apiserver service range: %v", err)
	}
	serving, err := c.ca.issueServing(a.dir, "apiserver",
		[]net.IP{net.ParseIP(a.ip), firstService},
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
	if err != nil {
		t.Fatalf("apiserver certificate: %v", err)
	}
	saKey, saPub := filepath.Join(a.dir, "service-account.key"), filepath.Join(a.dir, "service-account.pub")
	a.saKey = saKey
	if err := writeSigningKey(saKey, saPub); err != nil {
		t.Fatalf("service account key: %v", err)
	}
	if c.faults != nil {
		// Registered before the process below, so the links close after it is killed.
		a.startEtcdLinks(t)
	}
	a.args = a.flags(serving, saKey, saPub)

	admin, err := c.ca.issueClient(a.dir, "admin", "framework-admin", "system:masters")
	if err != nil {
		t.Fatalf("admin certificate: %v", err)
	}
	if a.admin, a.kubeconfig, err = a.credential("admin", admin); err != nil {
		t.Fatalf("admin credential: %v", err)
	}
	if a.clientset, err = kubernetes.NewForConfig(a.RESTConfig()); err != nil {
		t.Fatalf("admin clientset: %v", err)
	}

	a.proc = newProcess(t, "kube-apiserver", filepath.Join(a.dir, "kube-apiserver.log"))
	a.start(t)
	return a
}

func (a *APIServer) flags(serving *keyPair, saKey, saPub string) []string {
	var etcdServers []string
	storage := a.cfg.Storage
	if len(storage) == 0 {
		storage = a.c.Members()
	}
	for _, m := range storage {
		if l := a.etcdLinks[m]; l != nil {
			etcdServers = append(etcdServers, l.URL())
		} else {
			etcdServers = append(etcdServers, m.ClientURL())
		}
	}
	args := []string{
		"--bind-address=" + a.ip,
		"--advertise-address=" + a.ip,
		"--secure-port=" + strconv.Itoa(apiserverPort),
		"--tls-cert-file=" + serving.CertFile,
		"--tls-private-key-file=" + serving.KeyFile,
		// Unused while a serving certificate is given, but the default lives
		// under /var/run, which a test must not touch.
		"--cert-dir=" + a.dir,
		"--client-ca-file=" + a.c.ca.file,
		"--authorization-mode=RBAC",
		"--service-account-issuer=" + a.URL(),
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=" + a.cfg.ServiceCIDR,
		"--etcd-servers=" + strings.Join(etcdServers, ","),
	}
	if net.ParseIP(a.ip).IsLoopback() {
		// The reconciler publishes the advertise address as the endpoint of the "kubernetes"
		// Service and refuses a loopback one at startup. Only the node tier dials the Service.
		args = append(args, "--endpoint-reconciler-type=none")
	}
	if a.cfg.Nodes {
		args = append(args, "--enable-admission-plugins=NodeRestriction")
		args[slices.Index(args, "--authorization-mode=RBAC")] = "--authorization-mode=Node,RBAC"
	}
	if tf := a.c.TLS(); tf != nil {
		args = append(args,
			"--etcd-cafile="+tf.CA,
			"--etcd-certfile="+tf.ClientCert,
			"--etcd-keyfile="+tf.ClientKey,
		)
	}
	return args
}

func (a *APIServer) startEtcdLinks(t TB) {
	t.Helper()
	n := newFaultNet(t, filepath.Join(a.dir, "faults.log"))
	a.etcdLinks = map[*Member]*Link{}
	for _, m := range a.c.Members() {
		p, addr, err := n.newLink("apiserver "+m.Name, m.IP(), net.JoinHostPort(m.IP(), strconv.Itoa(etcdClientPort)))
		if err != nil {
			t.Fatalf("apiserver link to %s: %v", m.Name, err)
		}
		a.etcdLinks[m] = &Link{name: "apiserver etcd " + m.Name, url: a.c.scheme() + "://" + addr, p: p}
	}
}

func (a *APIServer) start(t TB) {
	t.Helper()
	if err := a.proc.start(a.bin, a.args...); err != nil {
		t.Fatalf("%v", err)
	}
	a.proc.waitReady(t, apiserverReadyTimeout, "/readyz not ok at "+a.URL(), func(ctx context.Context) error {
		body, err := a.clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%w: %s", err, body)
		}
		// Objects in "default" are what most tests create first, and the
		// apiserver creates that namespace only after it reports ready.
		_, err = a.clientset.CoreV1().Namespaces().Get(ctx, corev1.NamespaceDefault, metav1.GetOptions{})
		return err
	})
}

// URL returns the apiserver's https URL.
func (a *APIServer) URL() string {
	return "https://" + net.JoinHostPort(a.ip, strconv.Itoa(apiserverPort))
}

// Kubeconfig returns the path of an admin kubeconfig (a client certificate in
// group system:masters), with the CA and the key embedded.
func (a *APIServer) Kubeconfig() string { return a.kubeconfig }

// RESTConfig returns the admin configuration, a fresh copy on every call so
// that callers may modify it.
func (a *APIServer) RESTConfig() *rest.Config { return rest.CopyConfig(a.admin) }

// Clientset returns an admin clientset.
func (a *APIServer) Clientset() kubernetes.Interface { return a.clientset }

// LogFile returns the path of the apiserver's log, kept across restarts.
func (a *APIServer) LogFile() string { return a.proc.logPath }

// Restart stops the apiserver with SIGTERM and starts it again with the same
// flags, waiting for /readyz.
func (a *APIServer) Restart(t TB) {
	t.Helper()
	if err := a.proc.stop(); err != nil {
		t.Fatalf("stop apiserver: %v", err)
	}
	a.start(t)
}
