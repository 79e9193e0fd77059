package join

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/etcdmember/kubectl-etcdmember/internal/peerurl"
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
	return peerurl.NormalizeList(in)
}
