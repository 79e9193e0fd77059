// Package release names what a release of kubectl-etcdmember ships: the platforms, the archive
// and file names, the krew manifest and its version. hack/dist builds from it and test/packaging
// checks against it, so the two cannot disagree about what a release holds.
package release

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

const (
	// Binary is the plugin's executable name on every platform but Windows; kubectl finds plugins
	// by this kubectl-<name> prefix on PATH.
	Binary = "kubectl-etcdmember"
	// Completion is the script kubectl (1.26 and later) runs to complete the plugin's arguments.
	Completion = "kubectl_complete-etcdmember"
	// License ships in every archive: krew's validator and the Apache License both ask for it.
	License = "LICENSE"
	// ManifestName is the rendered krew manifest's file name; validate-krew-manifest requires the
	// base name to equal metadata.name.
	ManifestName = "etcdmember.yaml"
	// PluginName is the krew plugin's metadata.name.
	PluginName = "etcdmember"
)

// Platform is one GOOS/GOARCH pair that a release ships an archive for.
type Platform struct {
	OS   string
	Arch string
}

// Platforms are the targets of a release, in the order the archives are built and listed.
var Platforms = []Platform{
	{OS: "linux", Arch: "amd64"},
	{OS: "linux", Arch: "arm64"},
	{OS: "darwin", Arch: "amd64"},
	{OS: "darwin", Arch: "arm64"},
	{OS: "windows", Arch: "amd64"},
}

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// BinaryName is the executable's name inside the archive.
func (p Platform) BinaryName() string {
	if p.OS == "windows" {
		return Binary + ".exe"
	}
	return Binary
}

// ArchiveName is the archive's file name: zip for Windows, where tar.gz has no native tool.
func (p Platform) ArchiveName() string {
	if p.OS == "windows" {
		return fmt.Sprintf("%s_%s_%s.zip", Binary, p.OS, p.Arch)
	}
	return fmt.Sprintf("%s_%s_%s.tar.gz", Binary, p.OS, p.Arch)
}

// Files are the names an archive holds, sorted. Windows gets no completion script: kubectl there
// looks plugins up through PATHEXT, so an extensionless shell script would never be run.
func (p Platform) Files() []string {
	if p.OS == "windows" {
		return []string{License, p.BinaryName()}
	}
	return []string{License, p.BinaryName(), Completion}
}

// ParsePlatform reads "os/arch".
func ParsePlatform(s string) (Platform, error) {
	osName, arch, ok := strings.Cut(s, "/")
	if !ok || osName == "" || arch == "" || strings.Contains(arch, "/") {
		return Platform{}, fmt.Errorf("platform %q: want os/arch", s)
	}
	return Platform{OS: osName, Arch: arch}, nil
}

var notPrerelease = regexp.MustCompile(`[^0-9A-Za-z-]+`)

// KrewVersion turns the stamped version (git describe output) into the semver with a leading v
// that krew requires in spec.version. A tag such as v1.2.3, or git describe's v1.2.3-4-gabcdef-dirty
// (a valid pre-release), passes through. Anything else, such as a bare commit "7281f66-dirty" from a
// tree without tags, becomes v0.0.0-dev-7281f66-dirty: a pre-release of 0.0.0 sorts below every real
// release, so `kubectl krew upgrade` never prefers a development build, and the single identifier
// starting with "dev" cannot trip semver's rule against leading zeros in numeric identifiers.
func KrewVersion(stamped string) string {
	s := strings.TrimSpace(stamped)
	if s != "" && !strings.HasPrefix(s, "v") {
		if _, err := version.ParseSemantic(s); err == nil {
			s = "v" + s
		}
	}
	if IsKrewVersion(s) {
		return s
	}
	suffix := strings.Trim(notPrerelease.ReplaceAllString(s, "-"), "-")
	if suffix == "" || suffix == "dev" {
		return "v0.0.0-dev"
	}
	return "v0.0.0-dev-" + suffix
}

// IsKrewVersion reports whether krew accepts v as spec.version: a leading v, then semver as
// k8s.io/apimachinery parses it (krew's own check).
func IsKrewVersion(v string) bool {
	if !strings.HasPrefix(v, "v") || strings.TrimSpace(v) != v {
		return false
	}
	_, err := version.ParseSemantic(v)
	return err == nil
}
