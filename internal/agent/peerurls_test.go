package agent

import (
	"strings"
	"testing"
)

func TestValidateAdvertisePeerURLs(t *testing.T) {
	opts := DefaultOptions()
	opts.EtcdEndpoints = []string{"http://127.0.0.1:2379"}
	opts.AdvertisePeerURLs = []string{"http://10.0.0.1:2380"}
	if err := opts.Validate(); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	opts.AdvertisePeerURLs = []string{"http://10.0.0.1"}
	if err := opts.Validate(); err == nil || !strings.Contains(err.Error(), "--advertise-peer-urls") {
		t.Errorf("want an error naming --advertise-peer-urls, got %v", err)
	}
}
