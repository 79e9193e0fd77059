// Package framework runs real etcd members and a real kube-apiserver for
// integration tests, each process on its own loopback address so that tests
// (and test binaries of other packages) can run side by side.
//
// The binaries come from bin/ at the repository root ("make testbin"), or
// from $ETCDMEMBER_BIN_DIR. A missing binary fails the test; it never skips.
//
// A scenario is a few lines. Three members with TLS, kill member 2, restart
// the apiserver:
//
//	func TestSurvivesMemberLoss(t *testing.T) {
//		c := framework.NewCluster(t, framework.ClusterConfig{Size: 3, TLS: true})
//		api := framework.StartAPIServer(t, c)
//
//		c.Member("node-2").Kill(t)
//		api.Restart(t)
//
//		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
//		defer cancel()
//		if _, err := api.Clientset().CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err != nil {
//			t.Fatal(err)
//		}
//	}
//
// Membership changes go through etcd itself: AddMember and Rejoin call
// MemberAdd, while MoveTo only restarts a member on a new address and leaves
// the MemberUpdate to the test or to the product under test.
//
// StartAgent runs "bin/failpoints/kubectl-etcdmember serve" (AgentBinary, "make build") for a
// member, with TestAgentArgs' short timings, and waits until it is ready: its member recorded in
// an object, its own or one the leader discovered first (which keeps its discovered label for
// good). Agent.WaitOwnObject waits for its own.
//
// # Network faults
//
// ClusterConfig.FaultProxies routes the cluster's traffic through etcd's own fault proxy
// (go.etcd.io/etcd/pkg/v3/proxy), one per path, which a test can Blackhole, Delay and Heal:
//
//   - Cluster.PeerLink(t, a, b) is a's raft messages to b, and nothing else. rafthttp carries them
//     on two kinds of connection: the pipeline and snapshot posts a dials to b (a's messages in
//     the requests), and the streams b dials to a (GET /raft/stream/..., a's messages in the
//     responses). Members advertise a peer front that learns a connection's dialer from its first
//     request's X-PeerURLs or X-Server-From header and its kind from the request's method and
//     path, and routes it through a proxy per dialer, dialed member and kind. PeerLink(a, b)
//     faults the requests of a's posts to b and the responses of b's streams from a. The requests
//     that open streams and the acks to posts carry no messages, and no PeerLink faults them, so a
//     one-way cut stays one-way when the streams are dialed again (after a restart or a heal).
//     TLS hides the headers, so PeerLink needs a plaintext cluster; under TLS,
//     Member.PeerIngress(t) faults every peer connection dialed to a member at once (in a
//     plaintext cluster, only those that name no member: version checks, probes).
//   - Member.ClientLink(t) is behind the member's advertised client URL, ClientURL(), which
//     etcd lists and Endpoints, Client, Etcdctl and the agents' probes use. ListenClientURL and
//     DirectClient bypass it, as the framework's own calls do.
//   - Agent.EtcdLink(t) is one agent's --etcd-endpoints, so an agent can lose its etcd while the
//     member stays healthy for everyone else.
//   - APIServer.EtcdLink(t, m) is the apiserver's --etcd-servers entry for m: cutting a member's
//     client URL leaves the apiserver alone.
//
// A Blackhole drops bytes and keeps the connections open, so calls time out rather than fail. A
// Stall holds the bytes instead, and lets them all through in order when healed: calls neither
// fail nor complete meanwhile, as through a control plane that answers slowly but answers.
// etcd 3.6 and 3.7 do not notice a peer stream going silent: client/pkg's NewTimeoutTransport sets the
// read timeout rafthttp asks for on http.Transport.Dial, which the DialContext it also sets
// overrides. etcd_network_active_peers therefore stays at 1 across a peer blackhole; raft does
// notice, as etcd_network_peer_received_bytes_total{From} stopping, and a follower that hears
// nothing losing its leader and applying nothing. Heal after a Blackhole closes every connection
// of the healed link, whether or not it lost bytes, and etcd redials. Delay's jitter is drawn
// once per call, not per packet. Members keep their links across restarts and Rejoin, but cannot
// MoveTo. Each cluster's and apiserver's proxies log to faults.log in its directory and close at
// its cleanup, after its processes are killed.
//
// # The node tier
//
// A test binary whose TestMain calls RunInNodeNamespace runs in a network and mount namespace of
// its own (it needs root), where StartNodeCluster puts etcd members, the apiserver,
// kube-controller-manager and kube-scheduler at addresses of the tier's subnet, and
// StartKubeletNode a member's node: containerd, runc, kube-proxy and a kubelet that registers its
// Node, with the image of make image imported. Members named to StartNodeCluster get node
// namespaces of their own (NewNodeNamespaces). What a kubelet changes on the host is put back and
// checked when the run ends (RestoreHost), or by the next run after a killed one.
//
// Every process is killed at the test's cleanup. Logs live under
// t.TempDir(); when the test failed, the last lines of each are logged, every
// line prefixed with the process name. The framework only needs a TB, so a plain program
// such as the demo can drive it as well.
package framework
