package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

// renewedCertValidity is how long the first client certificate of TestRenewedAgentCertificate
// lasts: longer than the agent's restart with it and an election (about 10 s), short enough to
// expire within the test.
const renewedCertValidity = 30 * time.Second

// TestRenewedAgentCertificate: an agent whose kubeconfig embeds its client certificate, as
// `kubeadm kubeconfig user` writes it, goes on without a restart when the file is renewed in
// place and the old certificate expires: the apiserver checks a certificate's expiry at every
// request, so an agent that kept the old one could do nothing through the API. It leads, and
// carries out a leave, after the expiry.
func TestRenewedAgentCertificate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	renewed, target := e.agents["node-1"], e.cluster.Member("node-3")
	_, kubeconfig := e.api.ExpiringUser(t, renewedCertValidity, "etcdmember-agent", "etcdmember:agents")
	expires := time.Now().Add(renewedCertValidity)
	renewed.Stop(t)
	renewed.SetArgs("--kubeconfig=" + kubeconfig)
	renewed.Start(t)
	for name, a := range e.agents {
		if a != renewed {
			a.Stop(t)
			delete(e.agents, name)
		}
	}
	framework.Eventually(t, settle, pollEvery, "node-1's agent leads", func(context.Context) (bool, error) {
		return e.leaderAgent() == renewed.Name, nil
	})

	e.api.RenewUser(t, kubeconfig, "etcdmember-agent", "etcdmember:agents")
	if wait := time.Until(expires); wait > 0 {
		t.Logf("the kubeconfig renewed; waiting %s for its old certificate to expire", wait.Round(time.Second))
		time.Sleep(wait + time.Second)
	}
	e.leave(target.Name)
	e.waitFor(target.Name, "Left=True/Removed", removedByUs)

	if n, err := renewed.LogCount("starting: "); err != nil || n != 2 {
		t.Errorf("node-1's agent started %d times (%v), want 2: once by the scenario's setup, once with the expiring certificate", n, err)
	}
	if !renewed.Running() {
		t.Error("node-1's agent is not running")
	}
	if n, err := renewed.LogCount("client certificate changed; connecting again with it"); err != nil || n == 0 {
		t.Errorf("node-1's agent logged no change of its client certificate (%v)", err)
	}
}
