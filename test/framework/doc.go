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
// member, with TestAgentArgs' short timings, and waits until it has registered the member.
//
// Every process is killed at the test's cleanup. Logs live under
// t.TempDir(); when the test failed, the last lines of each are logged, every
// line prefixed with the process name. The framework only needs a TB, so a plain program
// such as the demo can drive it as well.
package framework
