// Package naming maps etcd member names to EtcdMember object names.
package naming

import (
	"fmt"
	"hash/fnv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// maxBaseLength keeps generated names within 63 characters, "-" and an 8-digit hash included, so
// they stay short enough for label values and terminal columns.
const maxBaseLength = validation.DNS1123LabelMaxLength - 9

// ObjectName returns the EtcdMember object name for an etcd member name: the name itself when it
// is a valid object name (a DNS-1123 subdomain), otherwise a deterministic valid name (lowercased, invalid characters
// replaced, plus a hash of the original so that distinct etcd names never share an object). The
// same etcd name always gives the same object name, which is what lets a re-joined node find its
// object again. An empty name (a member that never started) has no object name: the caller names
// such members after their ID.
func ObjectName(etcdName string) string {
	if etcdName == "" {
		return ""
	}
	if len(validation.IsDNS1123Subdomain(etcdName)) == 0 {
		return etcdName
	}
	var b strings.Builder
	for _, r := range strings.ToLower(etcdName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	base := strings.Trim(b.String(), "-")
	if len(base) > maxBaseLength {
		base = strings.TrimRight(base[:maxBaseLength], "-")
	}
	if base == "" {
		base = "member"
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(etcdName))
	return fmt.Sprintf("%s-%08x", base, h.Sum32())
}
