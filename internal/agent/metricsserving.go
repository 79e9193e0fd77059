package agent

import (
	"fmt"
	"net"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// metricsServing is how the agent serves /metrics. The metrics name every member and its health,
// so off loopback they go over HTTPS to callers the apiserver vouches for: a TokenReview of the
// bearer token and a SubjectAccessReview of get on the non-resource URL /metrics, as
// kube-controller-manager serves its own. Plain HTTP stays for loopback, which only the node's
// own processes reach. secure nil decides by the address; true forces HTTPS on loopback too.
func metricsServing(addr string, secure *bool, certDir string) (metricsserver.Options, error) {
	o := metricsserver.Options{BindAddress: addr}
	if addr == "0" {
		return o, nil
	}
	loopback, err := isLoopback(addr)
	if err != nil {
		return o, err
	}
	on := !loopback
	if secure != nil {
		if !*secure && !loopback {
			return o, fmt.Errorf("--metrics-secure=false needs a loopback --metrics-bind-address, not %q: anyone who reaches that address could read every member's name, ID and health", addr)
		}
		on = *secure
	}
	if on {
		o.SecureServing = true
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
		// Empty: controller-runtime serves a self-signed certificate it makes at start.
		o.CertDir = certDir
	}
	return o, nil
}

// isLoopback tells whether a bind address only listens on loopback. A wildcard host (":9469",
// "0.0.0.0:9469") listens everywhere and is not.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("--metrics-bind-address %q: %w", addr, err)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}
