package framework

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Etcdctl runs bin/etcdctl against the cluster's running members (with its client certificate
// under TLS) and returns the combined output.
func Etcdctl(t TB, c *Cluster, args ...string) (string, error) {
	t.Helper()
	flags := []string{"--endpoints=" + strings.Join(c.Endpoints(), ",")}
	if files := c.TLS(); files != nil {
		flags = append(flags, "--cacert="+files.CA, "--cert="+files.ClientCert, "--key="+files.ClientKey)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, Binary(t, "etcdctl"), append(flags, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("etcdctl %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}
