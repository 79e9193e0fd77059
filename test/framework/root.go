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
