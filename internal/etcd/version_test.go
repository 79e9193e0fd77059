package etcd

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckLeadable(t *testing.T) {
	cases := []struct {
		version string
		ok      bool
	}{
		{"3.4.27", false},
		{"3.4.0", false},
		{"2.3.8", false},
		{"3.5.0", true},
		{"3.5.35", true},
		{"3.6.16", true},
		{"3.6.0-rc.1", true},
		{"3.7.0", true},
		{"4.0.0", true},
		{"", false},
		{"garbage", false},
		{"3.5", false},
		{"3.x.1", false},
		{"v3.5.0", false},
		{"3.5.0.1", false},
		{"-3.5.0", false},
		{"3.+5.0", false},
	}
	for _, tc := range cases {
		err := CheckLeadable(tc.version)
		if tc.ok {
			if err != nil {
				t.Errorf("CheckLeadable(%q) = %v, want nil", tc.version, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("CheckLeadable(%q) = nil, want a refusal", tc.version)
			continue
		}
		if !errors.Is(err, ErrEtcdTooOld) {
			t.Errorf("CheckLeadable(%q) = %v, want it to wrap ErrEtcdTooOld", tc.version, err)
		}
		// The operator reads this in the agent's log: it must name the version and the floor.
		for _, want := range []string{`"` + tc.version + `"`, "3.5.0", "quorum read"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("CheckLeadable(%q) = %q, want it to mention %s", tc.version, err, want)
			}
		}
	}
}

func TestCheckLeadableTooOldSaysWhatToDo(t *testing.T) {
	err := CheckLeadable("3.4.27")
	if err == nil || !strings.Contains(err.Error(), "upgrade etcd to 3.5 or later") {
		t.Fatalf("CheckLeadable(3.4.27) = %v, want it to tell the operator to upgrade", err)
	}
}
