package framework

import (
	"os"
	"path/filepath"
	"strings"
)

// shippedImage is the image reference the manifests of deploy/ ship, which a test replaces, and
// nothing else.
const shippedImage = "ghcr.io/etcdmember/kubectl-etcdmember:v0.1.0"

// ShippedManifest reads deploy/rel with the image reference replaced by image and nothing else
// changed: the tiers run what operators apply.
func ShippedManifest(t TB, rel, image string) string {
	t.Helper()
	root, ok := RepoRoot()
	if !ok {
		t.Fatalf("cannot find the repository root (the directory with %s's go.mod) above the working directory", modulePath)
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", rel))
	if err != nil {
		t.Fatalf("%v", err)
	}
	if strings.Count(string(data), shippedImage) != 1 {
		t.Fatalf("deploy/%s: expected the image %s exactly once", rel, shippedImage)
	}
	return strings.Replace(string(data), shippedImage, image, 1)
}
