package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MinLeadableVersion is the oldest etcd a leader may act on. Before 3.5 etcd answers MemberList
// from the serving member's own copy of the membership, without a quorum read, so a leader in
// front of a lagging member could count voters on a membership that has already changed and
// remove a member that quorum needs.
const MinLeadableVersion = "3.5.0"

// ErrEtcdTooOld is returned, wrapped, for an etcd below MinLeadableVersion and for a version that
// cannot be read as one, so callers can tell this refusal from a failed call with errors.Is.
var ErrEtcdTooOld = errors.New("refusing to lead this etcd")

// ServerVersion returns the etcd server version that endpoint reports about itself, such as
// "3.5.35".
func (c *Client) ServerVersion(ctx context.Context, endpoint string) (string, error) {
	st, err := c.Status(ctx, endpoint)
	if err != nil {
		return "", fmt.Errorf("reading the etcd server version: %w", err)
	}
	return st.Version, nil
}

// CheckLeadable returns nil if a leader may act on an etcd server of this version, and an error
// wrapping ErrEtcdTooOld that says why not otherwise. A version it cannot parse is refused as
// well: guessing would accept the very servers the check exists for.
func CheckLeadable(version string) error {
	major, minor, err := parseMajorMinor(version)
	if err != nil {
		return fmt.Errorf("%w: cannot tell whether etcd version %q is %s or later (%w), and before 3.5 "+
			"etcd serves the member list without a quorum read", ErrEtcdTooOld, version, MinLeadableVersion, err)
	}
	if major < 3 || (major == 3 && minor < 5) {
		return fmt.Errorf("%w: etcd %q is older than %s: before 3.5 etcd serves the member list from "+
			"the local member without a quorum read, so a leader could judge quorum on stale "+
			"membership; upgrade etcd to 3.5 or later", ErrEtcdTooOld, version, MinLeadableVersion)
	}
	return nil
}

// parseMajorMinor reads the major and minor numbers of a version as etcd reports it
// ("3.5.35", "3.6.0-rc.1"); the patch must be there and numeric, the rest is ignored.
func parseMajorMinor(version string) (major, minor int, err error) {
	core, _, _ := strings.Cut(version, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return 0, 0, errors.New("not MAJOR.MINOR.PATCH")
	}
	nums := make([]int, 3)
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p != strconv.Itoa(n) {
			return 0, 0, fmt.Errorf("%q is not a version number", p)
		}
		nums[i] = n
	}
	return nums[0], nums[1], nil
}
