package agent

import (
	"testing"

	"k8s.io/utils/ptr"
)

// TestMetricsServing: plain HTTP on loopback only; any other address, wildcards included, serves
// HTTPS behind the apiserver's authentication and authorization, and refuses to be told not to.
func TestMetricsServing(t *testing.T) {
	for _, tc := range []struct {
		addr       string
		secure     *bool
		wantSecure bool
		wantErr    bool
	}{
		{addr: "127.0.0.1:9469"},
		{addr: "127.3.4.5:9469"},
		{addr: "[::1]:9469"},
		{addr: "localhost:9469"},
		{addr: "0"},
		{addr: "10.0.0.1:9469", wantSecure: true},
		{addr: ":9469", wantSecure: true},
		{addr: "0.0.0.0:9469", wantSecure: true},
		{addr: "node-1.example:9469", wantSecure: true},
		{addr: "127.0.0.1:9469", secure: ptr.To(true), wantSecure: true},
		{addr: "10.0.0.1:9469", secure: ptr.To(true), wantSecure: true},
		{addr: "127.0.0.1:9469", secure: ptr.To(false)},
		{addr: "10.0.0.1:9469", secure: ptr.To(false), wantErr: true},
		{addr: ":9469", secure: ptr.To(false), wantErr: true},
		{addr: "10.0.0.1", wantErr: true},
	} {
		o, err := metricsServing(tc.addr, tc.secure, "")
		if (err != nil) != tc.wantErr {
			t.Errorf("%s (secure %v): error %v, want error: %t", tc.addr, ptr.Deref(tc.secure, false), err, tc.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if o.SecureServing != tc.wantSecure || (o.FilterProvider != nil) != tc.wantSecure {
			t.Errorf("%s (secure %v): HTTPS %t, authentication filter %t; want both %t",
				tc.addr, ptr.Deref(tc.secure, false), o.SecureServing, o.FilterProvider != nil, tc.wantSecure)
		}
	}
}
