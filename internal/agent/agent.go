// Package agent runs on every etcd node: it registers the local member as an EtcdMember object
// and takes part in electing the leader that runs the membership reconciler.
package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/controller"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/events"
	"github.com/etcdmember/kubectl-etcdmember/internal/peerurl"
)

// Options configures an agent. The etcd TLS fields take etcdctl's names.
type Options struct {
	// RESTConfig loads how to reach the API server (the plugin's kubectl connection flags); it is
	// called only once the other options proved valid, so that their errors come first.
	RESTConfig func() (*rest.Config, error)
	// APICertificate reads the client certificate and key of RESTConfig's kubeconfig again, as
	// PEM; nil when the agent authenticates otherwise (a ServiceAccount token, which client-go
	// reads again by itself). The agent presents what it returns at each new connection, so that
	// a renewed certificate needs no restart (apiconns.go).
	APICertificate func() (certPEM, keyPEM []byte, err error)
	EtcdEndpoints  []string
	EtcdCACert     string
	EtcdCert       string
	EtcdKey        string
	// Name is the object name of the local member; empty means its etcd name.
	Name string

	LeaderElect             bool
	LeaderElectionNamespace string
	LeaseDuration           time.Duration
	RenewDeadline           time.Duration
	RetryPeriod             time.Duration
	EventsNamespace         string

	MetricsBindAddress string
	// MetricsSecure serves the metrics over HTTPS with authentication and authorization; nil
	// decides by MetricsBindAddress (plain HTTP on loopback only). MetricsCertDir holds tls.crt
	// and tls.key for it; empty serves a self-signed certificate.
	MetricsSecure          *bool
	MetricsCertDir         string
	HealthProbeBindAddress string

	// EtcdWaitTimeout bounds how long the agent waits for the local etcd to answer at start.
	EtcdWaitTimeout        time.Duration
	SyncInterval           time.Duration
	MembershipPollInterval time.Duration
	ProbeInterval          time.Duration
	ProbeTimeout           time.Duration
	HealthRefresh          time.Duration
	RecheckInterval        time.Duration
	HandOverRetry          time.Duration
	LearnerStallTimeout    time.Duration
	// RemoveUnreachableAfter, when positive, turns on the dead-member policy; MinVoters is its
	// floor.
	RemoveUnreachableAfter time.Duration
	MinVoters              int

	// AdvertisePeerURLs are the peer URLs etcd should record for the local member; empty leaves
	// etcd's record alone.
	AdvertisePeerURLs []string
	// OnRemovedExec is a shell command run once after the local member was removed on request;
	// empty runs nothing. OnRemovedTimeout bounds it.
	OnRemovedExec    string
	OnRemovedTimeout time.Duration

	// NodeName is the Kubernetes Node this agent runs on, published in status.nodeName; empty
	// binds no Node.
	NodeName string
	// LeaveOnNodeDelete makes the leader ask a member to leave when its bound Node is deleted,
	// holding the Node's deletion until the member has left, for NodeDeleteHold at most.
	LeaveOnNodeDelete bool
	NodeDeleteHold    time.Duration
}

// DefaultOptions returns the defaults the CLI shows.
func DefaultOptions() Options {
	return Options{
		LeaderElect:             true,
		LeaderElectionNamespace: "kube-system",
		// A leader keeps its term through a control plane that answers nothing for up to about 9 s
		// (the renew deadline, less a renewal's round trip), and a killed one is replaced within
		// 13 to 18.4 s: docs/architecture.md, "Leader election".
		LeaseDuration:   14 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     time.Second,
		EventsNamespace: "kube-system",
		// Loopback by default: metrics and probes need no exposure beyond the node unless asked.
		MetricsBindAddress:     "127.0.0.1:9469",
		HealthProbeBindAddress: "127.0.0.1:9470",
		EtcdWaitTimeout:        2 * time.Minute,
		SyncInterval:           10 * time.Second,
		MembershipPollInterval: controller.DefaultMembershipPollInterval,
		ProbeInterval:          controller.DefaultProbeInterval,
		ProbeTimeout:           controller.DefaultProbeTimeout,
		HealthRefresh:          controller.DefaultHealthRefresh,
		RecheckInterval:        controller.DefaultRecheckInterval,
		HandOverRetry:          controller.DefaultHandOverRetry,
		LearnerStallTimeout:    controller.DefaultLearnerStallTimeout,
		MinVoters:              controller.DefaultMinVoters,
		OnRemovedTimeout:       5 * time.Minute,
		NodeDeleteHold:         controller.DefaultNodeDeleteHold,
	}
}

// Validate reports flag values that cannot work.
func (o Options) Validate() error {
	var errs []error
	if len(o.EtcdEndpoints) == 0 {
		errs = append(errs, errors.New("--etcd-endpoints is required: the local member's client URL"))
	}
	if (o.EtcdCert == "") != (o.EtcdKey == "") {
		errs = append(errs, errors.New("--etcd-cert and --etcd-key go together"))
	}
	if o.LeaderElect && (o.RetryPeriod >= o.RenewDeadline || o.RenewDeadline >= o.LeaseDuration) {
		errs = append(errs, fmt.Errorf("leader election needs retry period (%s) < renew deadline (%s) < lease duration (%s)",
			o.RetryPeriod, o.RenewDeadline, o.LeaseDuration))
	}
	for name, d := range map[string]time.Duration{
		"--sync-interval": o.SyncInterval, "--membership-poll-interval": o.MembershipPollInterval,
		"--probe-timeout": o.ProbeTimeout, "--etcd-wait-timeout": o.EtcdWaitTimeout,
		"--on-removed-timeout": o.OnRemovedTimeout, "--probe-interval": o.ProbeInterval,
		"--health-refresh-interval": o.HealthRefresh, "--learner-stall-timeout": o.LearnerStallTimeout,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", name, d))
		}
	}
	if _, err := metricsServing(o.MetricsBindAddress, o.MetricsSecure, o.MetricsCertDir); err != nil {
		errs = append(errs, err)
	}
	if o.ProbeTimeout >= o.ProbeInterval {
		errs = append(errs, fmt.Errorf("--probe-timeout (%s) must be shorter than --probe-interval (%s)", o.ProbeTimeout, o.ProbeInterval))
	}
	if o.RemoveUnreachableAfter < 0 {
		errs = append(errs, fmt.Errorf("--remove-unreachable-after must be 0 (off) or positive, got %s", o.RemoveUnreachableAfter))
	}
	if o.RemoveUnreachableAfter > 0 && o.RemoveUnreachableAfter < 2*o.ProbeInterval {
		// One failed probe is not "dead": a member restarting or a brief network blip would be
		// removed for it.
		errs = append(errs, fmt.Errorf("--remove-unreachable-after (%s) must be at least two probe intervals (%s)", o.RemoveUnreachableAfter, 2*o.ProbeInterval))
	}
	if o.NodeDeleteHold <= 0 {
		errs = append(errs, fmt.Errorf("--node-delete-hold must be positive, got %s", o.NodeDeleteHold))
	}
	if o.MinVoters < 1 {
		errs = append(errs, fmt.Errorf("--min-voters must be at least 1, got %d", o.MinVoters))
	}
	if _, err := peerurl.NormalizeList(o.AdvertisePeerURLs); err != nil {
		errs = append(errs, fmt.Errorf("--advertise-peer-urls: %w", err))
	}
	return errors.Join(errs...)
}

// Run runs the agent until ctx ends. It returns an error when the agent cannot start: bad
// configuration, unreadable certificates, or a local etcd that did not answer in time.
func Run(ctx context.Context, opts Options) error {
	if err := supported(); err != nil {
		return err
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	log := logf.FromContext(ctx)
	peerURLs, err := peerurl.NormalizeList(opts.AdvertisePeerURLs)
	if err != nil {
		return fmt.Errorf("--advertise-peer-urls: %w", err)
	}
	if opts.RESTConfig == nil {
		return errors.New("no API server configuration")
	}
	restConfig, err := opts.RESTConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	restConfig, conns, err := apiConfig(restConfig, opts.APICertificate, log.WithName("api"))
	if err != nil {
		return err
	}
	if opts.LeaveOnNodeDelete {
		if err := checkManagedMembership(ctx, restConfig, managedCheckRetry); err != nil {
			return err
		}
	}
	etcdClient, err := etcd.New(etcd.Config{
		Endpoints: opts.EtcdEndpoints, CACert: opts.EtcdCACert, Cert: opts.EtcdCert, Key: opts.EtcdKey,
	})
	if err != nil {
		return err
	}
	defer func() { _ = etcdClient.Close() }()
	local, err := waitForLocalMember(ctx, etcdClient, opts.EtcdEndpoints[0], opts.EtcdWaitTimeout)
	if err != nil {
		return err
	}
	log.Info("Local etcd member found", "memberID", etcd.IDString(local))

	mgr, err := newManager(restConfig, opts, log)
	if err != nil {
		return err
	}
	if err := addAgent(mgr, opts, restConfig, etcdClient, local, peerURLs); err != nil {
		return err
	}
	if err := mgr.Add(conns); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// newManager makes the agent's manager, which serves its metrics and health probes.
func newManager(restConfig *rest.Config, opts Options, log logr.Logger) (ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	metricsOpts, err := metricsServing(opts.MetricsBindAddress, opts.MetricsSecure, opts.MetricsCertDir)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 log,
		Metrics:                metricsOpts,
		HealthProbeBindAddress: opts.HealthProbeBindAddress,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	return mgr, nil
}

// addAgent adds the agent's two runnables, registration of the local member and leadership, and
// its health checks: ready once the local member is registered; crd-installed fails while the
// EtcdMember CRD is missing.
func addAgent(mgr ctrl.Manager, opts Options, restConfig *rest.Config, etcdClient *etcd.Client, local uint64, peerURLs []string) error {
	writer, err := client.New(restConfig, client.Options{Scheme: mgr.GetScheme(), FieldOwner: v1alpha1.FieldManagerAgent})
	if err != nil {
		return fmt.Errorf("creating the API client: %w", err)
	}
	recorder := &events.Recorder{Client: writer, Namespace: opts.EventsNamespace, Instance: opts.Name}
	registrar := &Registrar{
		Reader: mgr.GetAPIReader(), Client: writer, Etcd: etcdClient, Events: recorder,
		Endpoint: opts.EtcdEndpoints[0], Name: opts.Name, Interval: opts.SyncInterval,
		PeerURLs: peerURLs, OnRemoved: OnRemovedHook{Command: opts.OnRemovedExec, Timeout: opts.OnRemovedTimeout},
		NodeName: opts.NodeName,
	}
	identityName := opts.Name
	if identityName == "" {
		identityName = etcd.IDString(local)
	}
	lead := &leadership{
		opts: opts, rest: restConfig, etcd: etcdClient, events: recorder, registrar: registrar,
		intents:  etcd.NewIntents(etcdClient),
		identity: newIdentity(identityName),
	}
	if recorder.Instance == "" {
		recorder.Instance = lead.identity
	}
	if err := mgr.Add(registrar); err != nil {
		return err
	}
	if err := mgr.Add(lead); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	// A check of its own, so that /readyz names the cause even with its reasons withheld.
	if err := mgr.AddReadyzCheck("crd-installed", func(*http.Request) error { return registrar.CRDInstalled() }); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("registered", func(*http.Request) error { return registrar.Ready() })
}

// waitForLocalMember asks the local endpoint for its member ID until it answers: at boot the
// agent often starts before etcd does, and that is worth waiting for, not failing on.
func waitForLocalMember(ctx context.Context, c *etcd.Client, endpoint string, timeout time.Duration) (uint64, error) {
	log := logf.FromContext(ctx)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var id uint64
	var lastErr error
	err := localMemberBackoff.DelayFunc().Until(ctx, true, true, func(ctx context.Context) (bool, error) {
		st, err := c.Status(ctx, endpoint)
		if err != nil {
			lastErr = err
			log.Info("Waiting for the local etcd member", "endpoint", endpoint, "error", err.Error())
			return false, nil
		}
		id = st.MemberID
		return true, nil
	})
	var unverified *etcd.TLSVerificationError
	switch {
	case err != nil && errors.As(lastErr, &unverified):
		// It answered, with a certificate --etcd-cacert did not sign: waiting longer changes nothing.
		return 0, fmt.Errorf("local etcd at %s answered for %s, but its certificate was never verified: %w", endpoint, timeout, lastErr)
	case err != nil:
		return 0, fmt.Errorf("local etcd at %s did not answer within %s: %w", endpoint, timeout, lastErr)
	}
	return id, nil
}

// localMemberBackoff spaces the asks of waitForLocalMember: 200ms, doubling up to 5s, then 5s until
// the timeout. DelayFunc keeps the cap once it is reached, where ExponentialBackoffWithContext
// would give up.
var localMemberBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Cap: 5 * time.Second, Steps: math.MaxInt32}
