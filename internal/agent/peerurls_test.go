package agent

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

func TestValidateAdvertisePeerURLs(t *testing.T) {
	opts := DefaultOptions()
	opts.EtcdEndpoints = []string{"http://127.0.0.1:2379"}
	opts.AdvertisePeerURLs = []string{"http://10.0.0.1:2380"}
	if err := opts.Validate(); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	opts.AdvertisePeerURLs = []string{"http://10.0.0.1"}
	if err := opts.Validate(); err == nil || !strings.Contains(err.Error(), "--advertise-peer-urls") {
		t.Errorf("want an error naming --advertise-peer-urls, got %v", err)
	}
}

// TestUnverifiedNoteIsStable: the note names URL and problem, not the error behind it, so the
// same cause gives the same note, and so one Event.
func TestUnverifiedNoteIsStable(t *testing.T) {
	urls := []string{"http://10.0.0.9:2380"}
	note := func(detail string) string {
		return unverifiedNote(urls, []*etcd.PeerURLError{{URL: urls[0], Problem: "did not answer as an etcd peer", Err: errString(detail)}})
	}
	a, b := note("read tcp 127.0.0.1:40001->10.0.0.9:2380: connection reset"), note("read tcp 127.0.0.1:40002->10.0.0.9:2380: i/o timeout")
	if a != b {
		t.Errorf("notes differ with the error's detail:\n%s\n%s", a, b)
	}
	for _, want := range []string{urls[0] + " did not answer as an etcd peer", "--listen-peer-urls", "--advertise-peer-urls"} {
		if !strings.Contains(a, want) {
			t.Errorf("note %q lacks %q", a, want)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestAdvertisementPublishesOnlyVerified: a failed check leaves status.advertisedPeerURLs as it
// was and warns once per distinct failure; no flag empties the field.
func TestAdvertisementPublishesOnlyVerified(t *testing.T) {
	obj := member(metav1.ConditionTrue, v1alpha1.ReasonInMemberList)
	obj.Status.AdvertisedPeerURLs = []string{"http://10.0.0.2:2380"}
	advertisement{keep: true, warning: "x"}.apply(obj)
	if got := obj.Status.AdvertisedPeerURLs; len(got) != 1 || got[0] != "http://10.0.0.2:2380" {
		t.Errorf("a failed check changed the published URLs to %v", got)
	}
	advertisement{urls: []string{"http://10.0.0.3:2380"}}.apply(obj)
	if got := obj.Status.AdvertisedPeerURLs; len(got) != 1 || got[0] != "http://10.0.0.3:2380" {
		t.Errorf("verified URLs not published: %v", got)
	}
	advertisement{}.apply(obj)
	if got := obj.Status.AdvertisedPeerURLs; got != nil {
		t.Errorf("without --advertise-peer-urls the field keeps %v", got)
	}

	e := newHookEnv(t, interceptor.Funcs{}, obj)
	ctx := context.Background()
	for _, a := range []advertisement{
		{keep: true, warning: "refused"}, {keep: true, warning: "refused"}, // one Event
		{urls: []string{"http://10.0.0.3:2380"}}, // passes: forgotten
		{keep: true, warning: "refused"},         // back: a second Event
		{keep: true, warning: "taken"},           // another cause: a third
	} {
		e.r.recordAdvertisement(ctx, obj, a)
	}
	evs := e.eventReasons(t)
	if len(evs) != 3 {
		t.Fatalf("events %q, want three", evs)
	}
	for _, ev := range evs {
		if !strings.HasPrefix(ev, v1alpha1.ReasonPeerURLsUnverified+": ") {
			t.Errorf("event %q is not %s", ev, v1alpha1.ReasonPeerURLsUnverified)
		}
	}
}
