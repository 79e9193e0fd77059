package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/etcdmember/api/v1alpha1"
	"github.com/etcdmember/etcdmember/internal/etcd"
	"github.com/etcdmember/etcdmember/internal/events"
)

// Event reasons of --advertise-peer-urls. They live here rather than in api/v1alpha1 because
// only the agent on the member's own node writes them.
const (
	ReasonPeerURLsUpdated      = "PeerURLsUpdated"
	ReasonPeerURLsUpdateFailed = "PeerURLsUpdateFailed"
)

// normalizePeerURL checks one peer URL the way etcd needs it (http or https, a host, an
// explicit port, nothing else) and returns it in one canonical spelling, so that a flag value
// and etcd's record of the same endpoint compare equal.
func normalizePeerURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("peer URL %q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("peer URL %q: scheme must be http or https", s)
	}
	if u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" ||
		strings.Contains(s, "#") || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("peer URL %q: only scheme://host:port is allowed", s)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", fmt.Errorf("peer URL %q needs host:port: %w", s, err)
	}
	host, err = normalizeHost(host)
	if err != nil {
		return "", fmt.Errorf("peer URL %q: %w", s, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", fmt.Errorf("peer URL %q: port must be a number from 1 to 65535", s)
	}
	return u.Scheme + "://" + net.JoinHostPort(host, strconv.FormatUint(n, 10)), nil
}

// normalizeHost accepts an IP address (written the canonical way) or a DNS name (lowercased).
// IPv6 zones are refused: an address only valid on one of this node's interfaces means nothing
// to the other members.
func normalizeHost(host string) (string, error) {
	if host == "" {
		return "", errors.New("host is missing")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return "", errors.New("IPv6 zones are not allowed")
		}
		return ip.String(), nil
	}
	valid := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_'
	}
	if strings.IndexFunc(host, func(r rune) bool { return !valid(r) }) >= 0 {
		return "", fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
	}
	return strings.ToLower(host), nil
}

// normalizePeerURLs normalizes a list of peer URLs into a sorted set; an empty list stays empty.
func normalizePeerURLs(in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	var errs []error
	for _, s := range in {
		n, err := normalizePeerURL(strings.TrimSpace(s))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, n)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// samePeerURLs tells whether etcd's record names the same endpoints as want, which is
// normalized already. A recorded URL that does not normalize cannot equal a wanted one.
func samePeerURLs(recorded, want []string) bool {
	got := make([]string, 0, len(recorded))
	for _, s := range recorded {
		if n, err := normalizePeerURL(s); err == nil {
			s = n
		}
		got = append(got, s)
	}
	slices.Sort(got)
	return slices.Equal(slices.Compact(got), want)
}

// advertise makes etcd record the peer URLs this node advertises now. etcd never updates its
// record by itself: after an address change the other members keep dialling the old address. It
// runs before the object is read, so that fixing etcd does not wait for the API server, and
// returns self as etcd records it afterwards, with the Event to write about the object. A failure
// is logged and retried at the next sync; its Warning is written only when etcd's error changes,
// so a node that cannot update for an hour leaves one Event, not one per sync.
func (r *Registrar) advertise(ctx context.Context, self etcd.Member) (etcd.Member, peerURLEvent) {
	if len(r.PeerURLs) == 0 || samePeerURLs(self.PeerURLs, r.PeerURLs) {
		return self, peerURLEvent{}
	}
	id := etcd.IDString(self.ID)
	log := logf.FromContext(ctx).WithValues("memberID", id, "from", self.PeerURLs, "to", r.PeerURLs)
	change := fmt.Sprintf("%s -> %s", strings.Join(self.PeerURLs, ","), strings.Join(r.PeerURLs, ","))
	if err := r.Etcd.MemberUpdate(ctx, self.ID, r.PeerURLs); err != nil {
		log.Error(err, "Updating the local member's peer URLs failed; retrying at the next sync")
		if msg := err.Error(); msg != r.peerUpdateErr {
			r.peerUpdateErr = msg
			return self, peerURLEvent{warning: true, reason: ReasonPeerURLsUpdateFailed,
				note: fmt.Sprintf("Updating the peer URLs of member %s (%s) failed: %v", id, change, err)}
		}
		return self, peerURLEvent{}
	}
	r.peerUpdateErr = ""
	log.Info("Updated the local member's peer URLs")
	self.PeerURLs = slices.Clone(r.PeerURLs)
	return self, peerURLEvent{reason: ReasonPeerURLsUpdated,
		note: fmt.Sprintf("Updated the peer URLs of member %s: %s", id, change)}
}

// peerURLEvent is an Event advertise has to write once the object is known; no reason, no Event.
type peerURLEvent struct {
	warning      bool
	reason, note string
}

func (e peerURLEvent) record(ctx context.Context, rec *events.Recorder, obj *v1alpha1.EtcdMember) {
	switch {
	case e.reason == "":
	case e.warning:
		rec.Warning(ctx, obj, e.reason, "UpdatePeerURLs", e.note)
	default:
		rec.Normal(ctx, obj, e.reason, "UpdatePeerURLs", e.note)
	}
}
