package framework_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

func TestTLSCluster(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 3, TLS: true})
	api := framework.StartAPIServer(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	for _, ep := range c.Endpoints() {
		if !strings.HasPrefix(ep, "https://") {
			t.Errorf("endpoint %s is not https", ep)
		}
	}
	if _, err := c.Client(t).Put(ctx, "tls", "ok"); err != nil {
		t.Fatalf("put with client certificate: %v", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "over-tls"}}
	if _, err := api.Clientset().CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("apiserver storing over etcd TLS: %v", err)
	}

	caPEM, err := os.ReadFile(c.TLS().CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	anonymous, err := clientv3.New(clientv3.Config{
		Endpoints: c.Endpoints(),
		TLS:       &tls.Config{RootCAs: pool},
		Logger:    zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = anonymous.Close() }()
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if _, err := anonymous.Get(short, "tls"); err == nil {
		t.Fatalf("a client without a certificate read from the cluster")
	}
}
