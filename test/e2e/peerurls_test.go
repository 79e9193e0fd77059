package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

// TestPeerURLUnverifiedNeverApplied: a peer URL the local etcd does not answer on (a loopback
// address where nothing listens), or another member's peer URL, is neither published nor applied:
// status.advertisedPeerURLs keeps what was verified before, etcd's record does not change, and
// each cause gives one PeerURLsUnverified Warning however often the agent checks again.
func TestPeerURLUnverifiedNeverApplied(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{size: 3})
	others := nonLeaders(e)
	m, taken := others[0], others[1]
	cli := e.cluster.Client(t)
	a := e.agents[m.Name]

	// The member's own URL passes, and changes nothing: etcd records it already.
	a.SetArgs(e.leastPrivilege("--advertise-peer-urls=" + m.PeerURL())...)
	a.Restart(t)
	e.waitFor(m.Name, "status.advertisedPeerURLs = "+m.PeerURL(), func(o *v1alpha1.EtcdMember) bool {
		return slices.Equal(o.Status.AdvertisedPeerURLs, []string{m.PeerURL()})
	})

	l := listenLoopback(t, 2380)
	nowhere := "http://" + l.Addr().String()
	_ = l.Close()
	for _, bad := range []struct{ url, problem string }{
		{nowhere, "did not answer as an etcd peer"},
		{taken.PeerURL(), "is the peer URL of member " + taken.IDHex()},
	} {
		a.SetArgs(e.leastPrivilege("--advertise-peer-urls=" + bad.url)...)
		a.Restart(t)
		ev := e.waitEventNote(m.Name, corev1.EventTypeWarning, v1alpha1.ReasonPeerURLsUnverified, bad.url)
		if !strings.Contains(ev.Note, bad.problem) {
			t.Errorf("Event note %q lacks %q", ev.Note, bad.problem)
		}
		e.holds(m.Name, "status.advertisedPeerURLs keeps "+m.PeerURL(), 4*time.Second, func(o *v1alpha1.EtcdMember) bool {
			return slices.Equal(o.Status.AdvertisedPeerURLs, []string{m.PeerURL()}) && slices.Equal(o.Status.PeerURLs, []string{m.PeerURL()})
		})
		if n := countEventsNote(e, m.Name, v1alpha1.ReasonPeerURLsUnverified, bad.url); n != 1 {
			t.Errorf("%d %s Events about %s over four syncs, want 1", n, v1alpha1.ReasonPeerURLsUnverified, bad.url)
		}
		if got := etcdPeerURLs(t, cli, m.ID()); !slices.Equal(got, []string{m.PeerURL()}) {
			t.Fatalf("etcd records %v for %s after advertising %s, want %s", got, m.Name, bad.url, m.PeerURL())
		}
	}
	for _, reason := range []string{v1alpha1.ReasonPeerURLsUpdated, v1alpha1.ReasonPeerURLsUpdateFailed} {
		if n := countEvents(e, m.Name, reason); n != 0 {
			t.Errorf("%d %s Events, want none: nothing was to be applied", n, reason)
		}
	}
}

// waitEventNote waits for an Event about name with this type and reason whose note contains text.
func (e *env) waitEventNote(name, eventType, reason, text string) eventsv1.Event {
	e.t.Helper()
	ev, found := e.awaitEvent(name, func(ev eventsv1.Event) bool {
		return ev.Type == eventType && ev.Reason == reason && strings.Contains(ev.Note, text)
	})
	if !found {
		e.t.Fatalf("no %s Event %s about %s mentioning %q; events: %+v", eventType, reason, name, text, e.events(name))
	}
	return ev
}

func countEventsNote(e *env, name, reason, text string) int {
	n := 0
	for _, ev := range e.events(name) {
		if ev.Reason == reason && strings.Contains(ev.Note, text) {
			n++
		}
	}
	return n
}
