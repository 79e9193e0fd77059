package naming

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestObjectName(t *testing.T) {
	cases := map[string]string{
		"node-1":                 "node-1",
		"controller-0":           "controller-0",
		"ip-10-0-0-1.ec2":        "ip-10-0-0-1.ec2",
		"":                       "",
		"Node_1":                 "node-1-",
		"IP-10.EC2":              "ip-10-ec2-",
		"---":                    "member-",
		strings.Repeat("a", 300): strings.Repeat("a", 54) + "-",
	}
	for in, prefix := range cases {
		got := ObjectName(in)
		if !strings.HasPrefix(got, prefix) || (prefix == in && got != in) {
			t.Errorf("ObjectName(%q) = %q, want prefix %q", in, got, prefix)
		}
		if in != "" && len(validation.IsDNS1123Subdomain(got)) > 0 {
			t.Errorf("ObjectName(%q) = %q is not a valid name: %v", in, got, validation.IsDNS1123Subdomain(got))
		}
	}
	if ObjectName("Node_1") == ObjectName("node_1") {
		t.Errorf("distinct etcd names must not share an object name")
	}
}

func FuzzObjectName(f *testing.F) {
	for _, s := range []string{"node-1", "Node_1", "", "---", "ip-10-0-0-1.ec2.internal", "ünïcode"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := ObjectName(name)
		if name == "" {
			if got != "" {
				t.Fatalf("empty name gave %q", got)
			}
			return
		}
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Fatalf("ObjectName(%q) = %q: %v", name, got, errs)
		}
		if ObjectName(name) != got {
			t.Fatalf("ObjectName(%q) is not deterministic", name)
		}
	})
}
