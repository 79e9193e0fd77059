// Package peerurl checks and normalizes etcd peer URLs given by operators (the agent's
// --advertise-peer-urls, join's --peer-urls), so that a flag value and etcd's record of the same
// endpoint compare equal, and nothing etcd would refuse gets through.
package peerurl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// NormalizeList normalizes each URL (surrounding spaces dropped) and returns them sorted. It
// reports every bad or repeated URL at once; an empty list stays empty.
func NormalizeList(in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	var errs []error
	for _, s := range in {
		n, err := Normalize(strings.TrimSpace(s))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if slices.Contains(out, n) {
			errs = append(errs, fmt.Errorf("peer URL %q is given twice", s))
			continue
		}
		out = append(out, n)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// SameSet tells whether etcd's record names the same endpoints as want, a NormalizeList result.
// A recorded URL that does not normalize is compared as it is, and so cannot match.
func SameSet(recorded, want []string) bool {
	got := make([]string, 0, len(recorded))
	for _, s := range recorded {
		if n, err := Normalize(s); err == nil {
			s = n
		}
		got = append(got, s)
	}
	slices.Sort(got)
	return slices.Equal(slices.Compact(got), want)
}

// Normalize accepts scheme://host:port with scheme http or https, host an IP address or a
// DNS name and an explicit port, and nothing else: other members dial this URL, so a path, user
// or query would only be dropped or refused by etcd later.
func Normalize(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("peer URL %q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("peer URL %q: scheme must be http or https", s)
	}
	if u.Opaque != "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.ForceQuery ||
		u.Fragment != "" || strings.Contains(s, "#") {
		return "", fmt.Errorf("peer URL %q: only scheme://host:port is allowed", s)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", fmt.Errorf("peer URL %q needs an explicit port (scheme://host:port): %w", s, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", fmt.Errorf("peer URL %q: port must be a number from 1 to 65535", s)
	}
	if host, err = canonicalHost(host); err != nil {
		return "", fmt.Errorf("peer URL %q: %w", s, err)
	}
	return u.Scheme + "://" + net.JoinHostPort(host, strconv.FormatUint(n, 10)), nil
}

// canonicalHost spells an IP address the standard way and lowercases a DNS name. A zoned IPv6
// address only means something on this node, never to the members that dial it.
func canonicalHost(host string) (string, error) {
	if host == "" {
		return "", errors.New("host is missing")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return "", errors.New("IPv6 zones are not allowed")
		}
		return ip.String(), nil
	}
	if strings.IndexFunc(host, notHostChar) >= 0 {
		return "", fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
	}
	return strings.ToLower(host), nil
}

// notHostChar: DNS names take letters, digits, "-" and "."; "_" appears in real host names.
func notHostChar(r rune) bool {
	return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' && r != '.' && r != '_'
}
