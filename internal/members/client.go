// Package members is the model behind the plugin's commands: EtcdMember objects joined with etcd's
// live membership, the stale members among them, and leave requests followed to their outcome.
// It runs against any controller-runtime client, so its logic is tested without a cluster.
package members

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// Resource names EtcdMembers fully qualified, the way kubectl and RBAC rules must spell them:
// k0s ships an EtcdMember kind of its own, and a bare "etcdmember" may resolve to it.
const Resource = "etcdmembers.etcdmember.io"

// NewClient returns a client for EtcdMember objects on the API server cfg points at.
func NewClient(cfg *rest.Config) (client.WithWatch, error) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering the EtcdMember API: %w", err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating a client for %s: %w", cfg.Host, err)
	}
	return c, nil
}

// Get reads one object, bounded by status.APITimeout.
func Get(ctx context.Context, c client.Client, name string) (*v1alpha1.EtcdMember, error) {
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	m := &v1alpha1.EtcdMember{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, m); err != nil {
		return nil, err
	}
	return m, nil
}

// List reads the objects matching opts, bounded by timeout.
func List(ctx context.Context, c client.Client, timeout time.Duration, opts ...client.ListOption) (*v1alpha1.EtcdMemberList, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var list v1alpha1.EtcdMemberList
	if err := c.List(ctx, &list, opts...); err != nil {
		return nil, err
	}
	return &list, nil
}

// NotFound names the objects that do exist, since a typo is the likely cause.
func NotFound(ctx context.Context, c client.Client, name string) error {
	msg := fmt.Sprintf("EtcdMember %q not found", name)
	list, err := List(ctx, c, status.APITimeout)
	switch {
	case err != nil:
		return errors.New(msg)
	case len(list.Items) == 0:
		return fmt.Errorf("%s; there are no EtcdMember objects", msg)
	}
	names := make([]string, 0, len(list.Items))
	for _, m := range list.Items {
		names = append(names, m.Name)
	}
	return fmt.Errorf("%s; existing: %s", msg, strings.Join(names, ", "))
}

// Explain turns an API error of the request with this verb into one a user can act on: a missing
// CRD becomes a *NotInstalledError, which names the fix; for a forbidden request, needs lists the
// verbs the whole command requires, so one RBAC change fixes it.
func Explain(err error, verb, name, needs string) error {
	if missing := NotInstalled(err); missing != nil {
		return missing
	}
	target := Resource
	if name != "" {
		target = fmt.Sprintf("%s %q", Resource, name)
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("forbidden to %s %s; this command needs %s on %s: %w", verb, target, needs, Resource, err)
	}
	return fmt.Errorf("%s %s: %w", verb, target, err)
}
