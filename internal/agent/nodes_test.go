package agent

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// TestCheckManagedMembershipWaitsForTheAPI: an apiserver that cannot answer yet (503, as while it
// cannot reach its etcd) is asked again until it does; one that shows k3s's Node finalizer is a
// refusal at once. The server answers the three requests the check makes: the core and the
// group discovery, and the metadata list of Nodes.
func TestCheckManagedMembershipWaitsForTheAPI(t *testing.T) {
	for _, tc := range []struct {
		name       string
		unanswered int32
		finalizer  string
		refused    bool
		lists      int32
	}{
		{name: "answers after two failures", unanswered: 2, lists: 3},
		{name: "k3s manages membership", finalizer: k3sEtcdFinalizer, refused: true, lists: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lists atomic.Int32
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch r.URL.Path {
				case "/api":
					_, _ = fmt.Fprint(w, `{"kind":"APIVersions","versions":["v1"]}`)
				case "/apis":
					_, _ = fmt.Fprint(w, `{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`)
				case "/api/v1/nodes":
					if lists.Add(1) <= tc.unanswered {
						w.WriteHeader(http.StatusServiceUnavailable)
						_, _ = fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"ServiceUnavailable","code":503}`)
						return
					}
					finalizers := "[]"
					if tc.finalizer != "" {
						finalizers = fmt.Sprintf("[%q]", tc.finalizer)
					}
					_, _ = fmt.Fprintf(w, `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{},"items":[{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"n1","finalizers":%s}}]}`, finalizers)
				default:
					http.NotFound(w, r)
				}
			}))
			defer api.Close()
			retry := wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 100}
			err := checkManagedMembership(t.Context(), &rest.Config{Host: api.URL}, retry)
			var refusal managedElsewhere
			if errors.As(err, &refusal) != tc.refused || (!tc.refused && err != nil) {
				t.Fatalf("check = %v, want refused=%v", err, tc.refused)
			}
			if got := lists.Load(); got != tc.lists {
				t.Fatalf("%d lists of Nodes, want %d", got, tc.lists)
			}
		})
	}
}
