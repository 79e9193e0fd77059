package framework

import (
	"os"
	"path/filepath"
)

// RepoRoot returns the repository root: the nearest directory above the working directory that
// holds etcdmember's go.mod.
func RepoRoot() (string, bool) {
	wd, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if isModuleRoot(dir) {
			return dir, true
		}
		if filepath.Dir(dir) == dir {
			return "", false
		}
	}
}

// MustRepoRoot is RepoRoot that fails t when there is none.
func MustRepoRoot(t TB) string {
	t.Helper()
	root, ok := RepoRoot()
	if !ok {
		t.Fatalf("repository root (the directory of %s's go.mod) not found above the working directory", modulePath)
	}
	return root
}
