// Package cli holds the logic of the user-facing commands, status and leave, apart from their
// cobra wiring, so that it runs against any controller-runtime client and writer.
package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcdmember/etcdmember/api/v1alpha1"
)

// apiCallTimeout bounds each API request of leave, inside the deadline of the whole command.
const apiCallTimeout = 10 * time.Second

// resource names EtcdMembers the way RBAC rules and kubectl auth can-i spell them.
const resource = "etcdmembers.etcdmember.io"

// NewClient connects to the API server. An empty kubeconfig path resolves as kubectl does:
// $KUBECONFIG, then ~/.kube/config, then the in-cluster service account.
func NewClient(kubeconfig string) (client.WithWatch, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
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

func getMember(ctx context.Context, c client.Client, name string) (*v1alpha1.EtcdMember, error) {
	ctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
	defer cancel()
	m := &v1alpha1.EtcdMember{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, m); err != nil {
		return nil, err
	}
	return m, nil
}

func listMembers(ctx context.Context, c client.Client, timeout time.Duration) ([]v1alpha1.EtcdMember, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var list v1alpha1.EtcdMemberList
	if err := c.List(ctx, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// notFound names the objects that do exist, since a typo is the likely cause.
func notFound(ctx context.Context, c client.Client, name string) error {
	msg := fmt.Sprintf("EtcdMember %q not found", name)
	items, err := listMembers(ctx, c, apiCallTimeout)
	switch {
	case err != nil:
		return errors.New(msg)
	case len(items) == 0:
		return fmt.Errorf("%s; there are no EtcdMember objects", msg)
	}
	names := make([]string, 0, len(items))
	for _, m := range items {
		names = append(names, m.Name)
	}
	return fmt.Errorf("%s; existing: %s", msg, strings.Join(names, ", "))
}

// explain turns an API error of the request with this verb into one a user can act on; needs
// lists the verbs the whole command requires, so one RBAC change fixes it.
func explain(err error, verb, name, needs string) error {
	target := resource
	if name != "" {
		target = fmt.Sprintf("%s %q", resource, name)
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("forbidden to %s %s; this command needs %s on %s: %w", verb, target, needs, resource, err)
	}
	return fmt.Errorf("%s %s: %w", verb, target, err)
}
