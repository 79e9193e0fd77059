// Command dist cross-builds kubectl-etcdmember for every release platform and writes, into one
// directory, a reproducible archive per platform, their checksums and the krew manifest rendered
// from krew-manifest.yaml. `make dist` runs it from the repository root.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/hack/dist/release"
)

type options struct {
	goCmd    string
	pkg      string
	version  string
	ldflags  string
	mtime    time.Time
	manifest string
	out      string
	// onlyOS limits the run to one OS's archives: `make image` needs only linux's, and make test
	// starts its tests on them while the other platforms build. Such a run is no release, so it
	// writes no manifest and no checksums, and removes nothing.
	onlyOS string
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "dist:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("dist", flag.ContinueOnError)
	var o options
	var mtime int64
	fl.StringVar(&o.goCmd, "go", "go", "the go command")
	fl.StringVar(&o.pkg, "pkg", ".", "the main package to build")
	fl.StringVar(&o.version, "version", "", "the version stamped into the binaries (git describe output)")
	fl.StringVar(&o.ldflags, "ldflags", "", "linker flags; they must stamp -version")
	fl.Int64Var(&mtime, "mtime", 0, "archive entries' mtime in Unix seconds (the Makefile passes $SOURCE_DATE_EPOCH, the commit time)")
	fl.StringVar(&o.manifest, "manifest", "krew-manifest.yaml", "the krew manifest template")
	fl.StringVar(&o.out, "out", "dist", "output directory")
	fl.StringVar(&o.onlyOS, "os", "", "build only this OS's archives (no manifest, no checksums)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if o.version == "" {
		return errors.New("-version is required")
	}
	// A binary that does not report the version its manifest claims would be a confusing release.
	if !strings.Contains(o.ldflags, "="+o.version) {
		return fmt.Errorf("-ldflags %q does not stamp version %q", o.ldflags, o.version)
	}
	o.mtime = time.Unix(mtime, 0).UTC()
	return dist(&o)
}

func dist(o *options) error {
	tmpl, err := os.ReadFile(o.manifest)
	if err != nil {
		return fmt.Errorf("krew manifest template: %w", err)
	}
	// Checking the template before the builds saves minutes when it has drifted.
	m, err := release.ParseManifest(tmpl)
	if err != nil {
		return err
	}
	if err := release.CheckPlatforms(m); err != nil {
		return err
	}
	shared := map[string]release.File{}
	for _, name := range []string{release.License, release.Completion} {
		data, err := os.ReadFile(name)
		if err != nil {
			return fmt.Errorf("every archive ships %s: %w", name, err)
		}
		shared[name] = release.File{Name: name, Mode: 0o644, Data: data}
	}
	// kubectl runs the completion script itself, so it must be executable once unpacked.
	c := shared[release.Completion]
	c.Mode = 0o755
	shared[release.Completion] = c

	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	// dist/ ignores itself, so neither git status nor a commit of everything picks the archives up.
	if err := os.WriteFile(filepath.Join(o.out, ".gitignore"), []byte("*\n"), 0o644); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	build, err := os.MkdirTemp("", "etcdmember-dist-")
	if err != nil {
		return fmt.Errorf("build directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(build) }()

	sums := map[string]string{}
	for _, p := range release.Platforms {
		if o.onlyOS != "" && p.OS != o.onlyOS {
			continue
		}
		bin, err := o.build(p, build)
		if err != nil {
			return err
		}
		files := []release.File{{Name: p.BinaryName(), Mode: 0o755, Data: bin}}
		for _, name := range p.Files() {
			if f, ok := shared[name]; ok {
				files = append(files, f)
			}
		}
		sum, err := writeArchive(filepath.Join(o.out, p.ArchiveName()), files, o.mtime)
		if err != nil {
			return err
		}
		sums[p.ArchiveName()] = sum
		fmt.Fprintf(os.Stderr, "dist: %s  %s\n", sum, p.ArchiveName())
	}
	if o.onlyOS != "" {
		if len(sums) == 0 {
			return fmt.Errorf("-os %s: no release platform has that OS", o.onlyOS)
		}
		return nil
	}
	if err := removeStale(o.out, sums); err != nil {
		return err
	}
	rendered, err := release.RenderManifest(tmpl, release.KrewVersion(o.version), sums)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(o.out, release.ManifestName), rendered); err != nil {
		return err
	}
	return writeFile(filepath.Join(o.out, "checksums.txt"), checksums(sums))
}

// build cross-compiles one platform's binary. GOAMD64 and GOARM64 are pinned to Go's defaults so
// that a developer's environment cannot change the release's bytes or raise its CPU floor.
func (o *options) build(p release.Platform, dir string) ([]byte, error) {
	out := filepath.Join(dir, p.OS+"_"+p.Arch, p.BinaryName())
	cmd := exec.Command(o.goCmd, "build", "-trimpath", "-ldflags", o.ldflags, "-o", out, o.pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch, "GOAMD64=v1", "GOARM64=v8.0")
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("build %s: %w", p, err)
	}
	fmt.Fprintf(os.Stderr, "dist: built %s in %s\n", p, time.Since(start).Round(100*time.Millisecond))
	data, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", p, err)
	}
	return data, nil
}

func writeArchive(path string, files []release.File, mtime time.Time) (string, error) {
	var buf bytes.Buffer
	if err := release.WriteArchive(&buf, filepath.Base(path), files, mtime); err != nil {
		return "", err
	}
	if err := writeFile(path, buf.Bytes()); err != nil {
		return "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

// writeFile replaces path through a rename, so an interrupted run never leaves a truncated archive
// that a later krew install would reject with a checksum error.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// removeStale deletes archives of platforms no longer built, which the drift test would otherwise
// take for part of the release.
func removeStale(dir string, keep map[string]string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, release.Binary+"_") || e.Type()&fs.ModeType != 0 {
			continue
		}
		if _, ok := keep[name]; ok {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("remove stale %s: %w", name, err)
		}
	}
	return nil
}

// checksums is in sha256sum's format, so `sha256sum -c checksums.txt` verifies a download.
func checksums(sums map[string]string) []byte {
	names := make([]string, 0, len(sums))
	for name := range sums {
		names = append(names, name)
	}
	slices.Sort(names)
	var b bytes.Buffer
	for _, name := range names {
		fmt.Fprintf(&b, "%s  %s\n", sums[name], name)
	}
	return b.Bytes()
}
