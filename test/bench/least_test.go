//go:build bench

package bench

import (
	"context"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The least-cost leave changes this ConfigMap, which nothing but the bench watches, so that no
// agent acts on the change.
const (
	leastNamespace  = "default"
	leastConfigMap  = "etcdmember-bench-least"
	leastAnnotation = "bench.etcdmember.io/cycle"
	// leastIntentKey takes the bench's intent Put: a key of its own, so the agents never read it
	// as one of theirs.
	leastIntentKey = "/etcdmember-bench/least-intent"
)

// leastSample is the least a leave costs here when it keeps the steps etcdmember's safety rests
// on, with nothing else between them: the bench itself sees an object change through a watch,
// then at once and in parallel reads a fresh member list, probes every other voter as the guard
// does (a Status and a linearizable read each) and stores an intent, then calls MemberRemove. No
// decision, fence, status write or controller machinery is in it: on the same machine, a leave by
// any design that judges the cluster fresh and stores its intent before the removal cannot expect
// to be faster.
type leastSample struct {
	// seen is from the accepted patch to the watch event; ready from there until the list, the
	// probes and the intent are all done; rpc is the MemberRemove call; gone is from the accepted
	// patch until the member list no longer has the member.
	seen, ready, rpc, gone time.Duration
}

// createLeastConfigMap creates the object the least-cost leaves change.
func (e *env) createLeastConfigMap() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: leastNamespace, Name: leastConfigMap}}
	if err := e.client.Create(ctx, cm); err != nil {
		e.t.Fatalf("create ConfigMap %s/%s: %v", leastNamespace, leastConfigMap, err)
	}
}

func (e *env) leastOnce(cycle int) leastSample {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	rm := e.startRemoval(ctx)
	target, id, cli := rm.target, rm.target.ID(), rm.cli
	value := strconv.Itoa(cycle)
	seen := watchUntil(ctx, e.t, e.client, &corev1.ConfigMapList{}, func(cm *corev1.ConfigMap) bool {
		return cm.Annotations[leastAnnotation] == value
	}, client.InNamespace(leastNamespace), client.MatchingFields{"metadata.name": leastConfigMap})

	patchCtx, patchCancel := context.WithTimeout(ctx, callTimeout)
	defer patchCancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: leastNamespace, Name: leastConfigMap}}
	patch := `{"metadata":{"annotations":{"` + leastAnnotation + `":"` + value + `"}}}`
	if err := e.client.Patch(patchCtx, cm, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		e.t.Fatalf("patch ConfigMap %s/%s: %v", leastNamespace, leastConfigMap, err)
	}
	accepted := time.Now()
	seenAt := await(ctx, e.t, seen, "the ConfigMap change").at

	callCtx, callCancel := context.WithTimeout(ctx, callTimeout)
	defer callCancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	call := func(f func() error) {
		wg.Go(func() {
			if err := f(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	call(func() error { _, err := cli.MemberList(callCtx); return err })
	call(func() error { _, err := cli.Put(callCtx, leastIntentKey, value, clientv3.WithPrevKV()); return err })
	for _, m := range e.cluster.Members() {
		if m.Name == target.Name {
			continue
		}
		voter := e.etcd[m.Name]
		call(func() error {
			_, err := etcdserverpb.NewMaintenanceClient(voter.ActiveConnection()).Status(callCtx, &etcdserverpb.StatusRequest{})
			return err
		})
		call(func() error { _, err := voter.Get(callCtx, "etcdmember-health-probe"); return err })
	}
	wg.Wait()
	if len(errs) > 0 {
		e.t.Fatalf("least-cost leave of %s: %v", target.Name, errs)
	}
	ready := time.Now()
	if _, err := cli.MemberRemove(callCtx, id); err != nil {
		e.t.Fatalf("MemberRemove %s: %v", target.Name, err)
	}
	s := leastSample{
		seen:  seenAt.Sub(accepted),
		ready: ready.Sub(seenAt),
		rpc:   time.Since(ready),
		gone:  await(ctx, e.t, rm.gone, target.Name+" gone from etcd").Sub(accepted),
	}
	e.rejoin(target)
	return s
}
