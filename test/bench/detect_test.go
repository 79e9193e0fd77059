//go:build bench

package bench

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// detectionRuns is how many members are killed for the detection figure.
const detectionRuns = 10

// detections kills a member whose agent does not lead, runs times, and measures until its object
// says Healthy=False; the member is restarted and seen healthy again before the next run. The
// kill falls at a random point of the probe cycle, so the samples spread over one interval.
func (e *env) detections(runs int) []time.Duration {
	e.t.Helper()
	var out []time.Duration
	for i := range runs {
		leader := e.leaderAgent()
		var victim string
		for _, m := range e.cluster.Members() {
			if m.Name != leader {
				victim = m.Name
				break
			}
		}
		m := e.cluster.Member(victim)
		healthy := func(obj *v1alpha1.EtcdMember) bool {
			return status.HasReason(obj, v1alpha1.ConditionHealthy, v1alpha1.ReasonServing)
		}
		e.waitMember(victim, "healthy", healthy)
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		down := e.watchMember(ctx, victim, func(obj *v1alpha1.EtcdMember) bool {
			c := status.Get(obj, v1alpha1.ConditionHealthy)
			return c != nil && c.Status == metav1.ConditionFalse
		})
		killed := time.Now()
		m.Kill(e.t)
		d := await(ctx, e.t, down, victim+" Healthy=False").at.Sub(killed)
		cancel()
		e.t.Logf("detection %d/%d: %s Healthy=False %s after SIGKILL", i+1, runs, victim, d)
		out = append(out, d)
		m.Start(e.t)
		e.waitMember(victim, "healthy again", healthy)
	}
	return out
}
