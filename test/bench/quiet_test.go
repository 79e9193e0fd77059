//go:build bench

package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/internal/agent"
)

// benchProduction runs agents at their production defaults: a quiet minute first, while the
// cluster is steady, then failovers, then hand-overs with the other agents frozen, then the
// longest stall of the apiserver's etcd the leader rides out (on a test bed of its own), then the
// detection of killed members, then one node down for outageWindow. Each is a part that -run can
// select alone.
func benchProduction(t *testing.T, r *results) {
	e := newEnv(t, 3, productionTimings...)
	e.part(t, "quiet", func() { r.quiet = e.measureQuiet() })
	e.part(t, "failover", func() {
		r.failover[productionTimingsName] = e.failovers(runsFromEnv(e.t, failoverRunsEnv, failoverRuns))
	})
	e.part(t, "stall", func() { r.stall = e.stalls(stallRuns) })
	e.part(t, "ridesout", func() {
		// The stalls need the apiserver's links to etcd behind fault proxies: a test bed of its own.
		f := newEnvWith(e.t, envOptions{size: 3, faultProxies: true}, productionTimings...)
		r.ridesOut, r.ridesOutLost = f.rideOut(agent.DefaultOptions().LeaseDuration)
		r.ridesOutMeasured = true
	})
	e.part(t, "detection", func() { r.detection = e.detections(detectionRuns) })
	e.part(t, "outage", func() { r.outage = e.outage(outageWindowFromEnv(e.t)) })
}

// part runs f as the subtest name of t, with e reporting to that subtest meanwhile: a parent's
// Fatal must not be called from a subtest.
func (e *env) part(t *testing.T, name string, f func()) {
	t.Run(name, func(t *testing.T) {
		parent := e.t
		e.t = t
		defer func() { e.t = parent }()
		f()
	})
}

// quietWarmup lets a fresh start's registrations, first probes and first reconciles pass: they
// are not the steady state.
const quietWarmup = 15 * time.Second

// quietCost is what a steady cluster costs, per minute except for memory.
type quietCost struct {
	window  time.Duration
	members int
	leader  string
	// api counts the apiserver's requests by "VERB resource[/subresource]", from every client,
	// the apiserver's own included.
	api map[string]float64
	// leaseUpdates counts updates per Lease in kube-system, seen through a watch.
	leaseUpdates map[string]float64
	// agentRequests counts the agents' own API requests by HTTP method, all agents together.
	agentRequests map[string]float64
	// etcd counts gRPC requests handled by "Service/Method", all members together.
	etcd map[string]float64
	// usage is each agent's CPU time over the window and its RSS at the end.
	usage map[string]procUsage
}

// snapshot is every counter the quiet measurement compares, at one moment.
type snapshot struct {
	at            time.Time
	api           map[string]float64
	agentRequests map[string]float64
	etcd          map[string]float64
	usage         map[string]procUsage
}

func (e *env) measureQuiet() *quietCost {
	e.t.Helper()
	time.Sleep(quietWarmup)
	pids := e.agentPIDs()
	ctx, cancel := context.WithTimeout(context.Background(), quietWindow+settle)
	defer cancel()
	watchCtx, stopWatch := context.WithCancel(ctx)
	updates := e.countLeaseUpdates(watchCtx)
	before := e.snapshot(ctx, pids)
	time.Sleep(quietWindow)
	after := e.snapshot(ctx, pids)
	stopWatch()
	window := after.at.Sub(before.at)
	perMinute := func(before, after map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for k, v := range after {
			if d := v - before[k]; d > 0 {
				out[k] = d * float64(time.Minute) / float64(window)
			}
		}
		return out
	}
	q := &quietCost{
		window:        window,
		members:       len(e.cluster.Members()),
		leader:        e.leaderAgent(),
		api:           perMinute(before.api, after.api),
		leaseUpdates:  perMinute(nil, await(ctx, e.t, updates, "lease watch end")),
		agentRequests: perMinute(before.agentRequests, after.agentRequests),
		etcd:          perMinute(before.etcd, after.etcd),
		usage:         map[string]procUsage{},
	}
	for name, u := range after.usage {
		q.usage[name] = procUsage{cpu: u.cpu - before.usage[name].cpu, rss: u.rss}
	}
	return q
}

func (e *env) snapshot(ctx context.Context, pids map[string]int) snapshot {
	e.t.Helper()
	api, err := e.scrapeAPIServer(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	s := snapshot{
		at:            time.Now(),
		api:           api.sumBy("apiserver_request_total", requestKey),
		agentRequests: map[string]float64{},
		etcd:          map[string]float64{},
		usage:         map[string]procUsage{},
	}
	for name, a := range e.agents {
		byMethod := e.mustScrape(ctx, a).sumBy("rest_client_requests_total", func(l map[string]string) (string, bool) {
			return l["method"], true
		})
		addTo(s.agentRequests, byMethod)
		if s.usage[name], err = readUsage(pids[name]); err != nil {
			e.t.Fatalf("agent %s: %v", name, err)
		}
	}
	for _, m := range e.cluster.Members() {
		f, err := scrapeURL(ctx, m.ClientURL()+"/metrics")
		if err != nil {
			e.t.Fatalf("etcd %s: %v", m.Name, err)
		}
		addTo(s.etcd, f.sumBy("grpc_server_handled_total", grpcKey))
	}
	return s
}

// requestKey is "VERB resource[/subresource]"; requests for non-resource URLs, such as these
// scrapes of /metrics, are left out.
func requestKey(l map[string]string) (string, bool) {
	if l["resource"] == "" {
		return "", false
	}
	key := l["verb"] + " " + l["resource"]
	if l["subresource"] != "" {
		key += "/" + l["subresource"]
	}
	return key, true
}

// grpcKey is "Service/Method" without the package: "Cluster/MemberList".
func grpcKey(l map[string]string) (string, bool) {
	service := l["grpc_service"]
	return service[strings.LastIndex(service, ".")+1:] + "/" + l["grpc_method"], true
}

func addTo(sum, more map[string]float64) {
	for k, v := range more {
		sum[k] += v
	}
}

// countLeaseUpdates counts the updates of each Lease in kube-system until ctx ends, then sends
// the counts. Every leader-election renewal is an update, and so is the apiserver's renewal of
// its own identity Lease: this tells them apart, which the apiserver's metrics cannot.
func (e *env) countLeaseUpdates(ctx context.Context) <-chan map[string]float64 {
	e.t.Helper()
	w, err := e.client.Watch(ctx, &coordinationv1.LeaseList{}, client.InNamespace("kube-system"))
	if err != nil {
		e.t.Fatalf("watch leases: %v", err)
	}
	ch := make(chan map[string]float64, 1)
	go func() {
		defer w.Stop()
		counts := map[string]float64{}
		for ev := range w.ResultChan() {
			if lease, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type == watch.Modified {
				counts[lease.Name]++
			}
		}
		ch <- counts
	}()
	return ch
}
