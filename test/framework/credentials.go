package framework

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// clientQPS lifts client-go's default limit of 5 requests per second, which
// would make tests slower than the apiserver is.
const clientQPS, clientBurst = 100, 200

// credential turns a client certificate into a REST config and a kubeconfig
// file named after file, both embedding the CA and the key so either works
// on its own.
func (a *APIServer) credential(file string, kp *keyPair) (*rest.Config, string, error) {
	cfg := &rest.Config{
		Host: a.URL(),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   a.c.ca.certPEM,
			CertData: kp.CertPEM,
			KeyData:  kp.KeyPEM,
		},
		QPS:   clientQPS,
		Burst: clientBurst,
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["framework"] = &clientcmdapi.Cluster{Server: a.URL(), CertificateAuthorityData: a.c.ca.certPEM}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM}
	kc.Contexts["framework"] = &clientcmdapi.Context{Cluster: "framework", AuthInfo: "user"}
	kc.CurrentContext = "framework"
	path := filepath.Join(a.dir, file+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return nil, "", fmt.Errorf("write kubeconfig: %w", err)
	}
	return cfg, path, nil
}

// Restricted returns a credential for user (a client certificate with that
// CN) bound by a ClusterRole and ClusterRoleBinding to exactly rules, as a
// REST config and a kubeconfig path. It returns once the apiserver authorizes
// the first rule for user, so the first request of a test cannot race RBAC's
// cache. Call it once per user.
func (a *APIServer) Restricted(t TB, user string, rules []rbacv1.PolicyRule) (*rest.Config, string) {
	t.Helper()
	file := fmt.Sprintf("restricted-%d", a.users.Add(1))
	kp, err := a.c.ca.issueClient(a.dir, file, user)
	if err != nil {
		t.Fatalf("certificate for %s: %v", user, err)
	}
	cfg, path, err := a.credential(file, kp)
	if err != nil {
		t.Fatalf("credential for %s: %v", user, err)
	}

	a.bind(t, "framework:restricted:"+user, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}, user, rules)
	return cfg, path
}

// Token returns a bearer token of a new ServiceAccount kube-system/name bound to exactly rules,
// as an operator's credential would be: for kubectl's --token, with --server URL() and
// --certificate-authority CAFile(). It returns once the apiserver authorizes the first rule.
func (a *APIServer) Token(t TB, name string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	const ns = "kube-system"
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if _, err := a.clientset.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceAccount %s: %v", name, err)
	}
	a.bind(t, "framework:token:"+name, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns},
		"system:serviceaccount:"+ns+":"+name, rules)
	tr, err := a.clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for ServiceAccount %s: %v", name, err)
	}
	return tr.Status.Token
}

// CAFile is the CA certificate that verifies the apiserver's serving certificate.
func (a *APIServer) CAFile() string { return a.c.ca.file }

// bind grants subject exactly rules through a ClusterRole and ClusterRoleBinding called name,
// and waits until user (the subject's user name) is authorized for the first rule.
func (a *APIServer) bind(t TB, name string, subject rbacv1.Subject, user string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	rbac := a.clientset.RbacV1()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ClusterRole %s: %v", name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{subject},
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ClusterRoleBinding %s: %v", name, err)
	}
	if len(rules) > 0 {
		a.waitAuthorized(t, user, rules[0])
	}
}

// waitAuthorized polls a SubjectAccessReview for a request that rule allows.
func (a *APIServer) waitAuthorized(t TB, user string, rule rbacv1.PolicyRule) {
	t.Helper()
	spec := authorizationv1.SubjectAccessReviewSpec{User: user}
	first := func(s []string) string {
		if len(s) == 0 {
			return ""
		}
		return s[0]
	}
	if len(rule.NonResourceURLs) > 0 {
		spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: rule.NonResourceURLs[0], Verb: first(rule.Verbs)}
	} else {
		// RBAC spells a subresource as "pods/log"; a review splits it.
		resource, subresource, _ := strings.Cut(first(rule.Resources), "/")
		spec.ResourceAttributes = &authorizationv1.ResourceAttributes{
			Verb:        first(rule.Verbs),
			Group:       first(rule.APIGroups),
			Resource:    resource,
			Subresource: subresource,
			Name:        first(rule.ResourceNames),
		}
	}
	err := poll(callTimeout, func(ctx context.Context) error {
		review := &authorizationv1.SubjectAccessReview{Spec: spec}
		got, err := a.clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !got.Status.Allowed {
			return fmt.Errorf("not allowed yet: %s", got.Status.Reason)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("RBAC rules for %s not in effect: %v", user, err)
	}
}
