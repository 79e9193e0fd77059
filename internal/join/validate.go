package join

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CheckName accepts a name etcd can find again in ETCD_INITIAL_CLUSTER, which it splits at
// commas and at the first "=", and that an environment file can carry on one line.
func CheckName(name string) error {
	switch {
	case name == "":
		return errors.New("--name is required and must not be empty")
	case !utf8.ValidString(name):
		return fmt.Errorf("name %q is not valid UTF-8", name)
	case strings.ContainsAny(name, ",="):
		return fmt.Errorf(`name %q must not contain "," or "=": etcd splits ETCD_INITIAL_CLUSTER at them`, name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("name %q must not contain control characters", name)
	}
	return nil
}

// NormalizePeerURLs checks every URL and returns them in canonical spelling, sorted, the way
// etcd records a member's peer URLs, so that a second run compares equal to etcd's record.
func NormalizePeerURLs(in []string) ([]string, error) {
	if len(in) == 0 {
		return nil, errors.New("--peer-urls is required")
	}
	out := make([]string, 0, len(in))
	var errs []error
	for _, s := range in {
		n, err := NormalizePeerURL(s)
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

// NormalizePeerURL accepts scheme://host:port with scheme http or https, host an IP address or a
// DNS name and an explicit port, and nothing else: other members dial this URL, so a path, user
// or query would only be dropped or refused by etcd later.
func NormalizePeerURL(s string) (string, error) {
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
	if strings.IndexFunc(host, notDNSChar) >= 0 {
		return "", fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
	}
	return strings.ToLower(host), nil
}

func notDNSChar(r rune) bool {
	return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' && r != '.' && r != '_'
}
