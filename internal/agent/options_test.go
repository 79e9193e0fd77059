package agent

import (
	"strings"
	"testing"
	"time"
)

func TestValidateHealthAndPolicyFlags(t *testing.T) {
	valid := DefaultOptions()
	valid.EtcdEndpoints = []string{"http://127.0.0.1:2379"}
	if err := valid.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cases := []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"probe timeout not below interval", func(o *Options) { o.ProbeTimeout = o.ProbeInterval }, "--probe-timeout"},
		{"zero probe interval", func(o *Options) { o.ProbeInterval = 0 }, "--probe-interval"},
		{"zero stall timeout", func(o *Options) { o.LearnerStallTimeout = 0 }, "--learner-stall-timeout"},
		{"negative unreachable policy", func(o *Options) { o.RemoveUnreachableAfter = -time.Second }, "--remove-unreachable-after"},
		{"policy shorter than two probes", func(o *Options) { o.RemoveUnreachableAfter = o.ProbeInterval }, "two probe intervals"},
		{"no voter floor", func(o *Options) { o.MinVoters = 0 }, "--min-voters"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := valid
			tc.edit(&o)
			err := o.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.want)
			}
		})
	}
	on := valid
	on.RemoveUnreachableAfter = 5 * time.Minute
	if err := on.Validate(); err != nil {
		t.Fatalf("policy on with defaults: %v", err)
	}
}
