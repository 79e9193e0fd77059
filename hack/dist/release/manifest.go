package release

import (
	"bytes"
	"fmt"
	"path"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// The checked-in krew-manifest.yaml carries these placeholders; RenderManifest fills them.
const (
	VersionPlaceholder = "{{version}}"
	SHA256Placeholder  = "{{sha256}}"
)

// Manifest is the part of krew's index.Plugin (apiVersion krew.googlecontainertools.github.com/
// v1alpha2) that this project writes. It is parsed strictly, so a misspelt field in
// krew-manifest.yaml fails `make dist` instead of being dropped silently by krew.
type Manifest struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Metadata   ManifestMetadata `json:"metadata"`
	Spec       ManifestSpec     `json:"spec"`
}

// ManifestMetadata is the manifest's metadata.
type ManifestMetadata struct {
	Name string `json:"name"`
}

// ManifestSpec is the manifest's spec.
type ManifestSpec struct {
	Version          string             `json:"version"`
	Homepage         string             `json:"homepage"`
	ShortDescription string             `json:"shortDescription"`
	Description      string             `json:"description"`
	Caveats          string             `json:"caveats"`
	Platforms        []ManifestPlatform `json:"platforms"`
}

// ManifestPlatform is one entry of spec.platforms.
type ManifestPlatform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string         `json:"uri"`
	SHA256 string         `json:"sha256"`
	Bin    string         `json:"bin"`
	Files  []ManifestFile `json:"files"`
}

// ManifestFile is one files[] operation: krew copies from (a name in the archive) to a path in
// the plugin's install directory.
type ManifestFile struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// ParseManifest reads a krew manifest, template or rendered.
func ParseManifest(data []byte) (*Manifest, error) {
	var m Manifest
	if err := yaml.UnmarshalStrict(data, &m); err != nil {
		return nil, fmt.Errorf("krew manifest: %w", err)
	}
	return &m, nil
}

// Platform is the os/arch that the entry's selector picks. Krew matches the selector against
// every os/arch it knows; an entry that is not one exact pair would pick several or none.
func (p ManifestPlatform) Platform() (Platform, error) {
	labels := p.Selector.MatchLabels
	if len(labels) != 2 || labels["os"] == "" || labels["arch"] == "" {
		return Platform{}, fmt.Errorf("platform %s: selector.matchLabels must be exactly os and arch, got %v", p.URI, labels)
	}
	return Platform{OS: labels["os"], Arch: labels["arch"]}, nil
}

// Archive is the archive file name the entry downloads: the last element of its uri.
func (p ManifestPlatform) Archive() string { return path.Base(p.URI) }

// CheckPlatforms reports every difference between the manifest's platforms and Platforms: a
// platform on one side only, or an entry whose archive, bin or files are not what hack/dist puts
// in that platform's archive.
func CheckPlatforms(m *Manifest) error {
	var problems []string
	seen := map[Platform]bool{}
	for i, mp := range m.Spec.Platforms {
		p, err := mp.Platform()
		if err != nil {
			problems = append(problems, fmt.Sprintf("spec.platforms[%d]: %v", i, err))
			continue
		}
		if seen[p] {
			problems = append(problems, fmt.Sprintf("spec.platforms[%d]: %s listed twice", i, p))
		}
		seen[p] = true
		if !slices.Contains(Platforms, p) {
			problems = append(problems, fmt.Sprintf("spec.platforms[%d]: hack/dist builds no archive for %s", i, p))
			continue
		}
		if got, want := mp.Archive(), p.ArchiveName(); got != want {
			problems = append(problems, fmt.Sprintf("spec.platforms[%d] (%s): uri ends in %s, hack/dist writes %s", i, p, got, want))
		}
		if mp.Bin != p.BinaryName() {
			problems = append(problems, fmt.Sprintf("spec.platforms[%d] (%s): bin is %q, want %q", i, p, mp.Bin, p.BinaryName()))
		}
		var from []string
		for _, f := range mp.Files {
			from = append(from, f.From)
		}
		slices.Sort(from)
		if !slices.Equal(from, p.Files()) {
			problems = append(problems, fmt.Sprintf("spec.platforms[%d] (%s): files[].from are %v, the archive holds %v", i, p, from, p.Files()))
		}
	}
	for _, p := range Platforms {
		if !seen[p] {
			problems = append(problems, fmt.Sprintf("hack/dist builds %s, which krew-manifest.yaml does not list", p.ArchiveName()))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("krew manifest and hack/dist disagree:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// RenderManifest fills the template's placeholders: every {{version}} with version (already in
// krew's form, see KrewVersion) and the {{sha256}} of each platform with sums[its archive]. The
// rendering is textual so that the output keeps the template's layout and block scalars; the
// template is parsed first to make sure that the n-th {{sha256}} in the text is the n-th
// platform's. The leading comment, which speaks of the placeholders, is dropped.
func RenderManifest(tmpl []byte, version string, sums map[string]string) ([]byte, error) {
	if !IsKrewVersion(version) {
		return nil, fmt.Errorf("version %q is not semver with a leading v, which krew requires", version)
	}
	m, err := ParseManifest(tmpl)
	if err != nil {
		return nil, err
	}
	if m.Spec.Version != VersionPlaceholder {
		return nil, fmt.Errorf("krew manifest template: spec.version is %q, want %q", m.Spec.Version, VersionPlaceholder)
	}
	if err := CheckPlatforms(m); err != nil {
		return nil, err
	}
	body := stripLeadingComment(tmpl)
	if n := bytes.Count(body, []byte(SHA256Placeholder)); n != len(m.Spec.Platforms) {
		return nil, fmt.Errorf("krew manifest template: %d %s for %d platforms; it belongs in each platform's sha256 and nowhere else", n, SHA256Placeholder, len(m.Spec.Platforms))
	}
	out := bytes.ReplaceAll(body, []byte(VersionPlaceholder), []byte(version))
	for i, mp := range m.Spec.Platforms {
		if mp.SHA256 != SHA256Placeholder {
			return nil, fmt.Errorf("krew manifest template: spec.platforms[%d].sha256 is %q, want %q", i, mp.SHA256, SHA256Placeholder)
		}
		sum, ok := sums[mp.Archive()]
		if !ok {
			return nil, fmt.Errorf("krew manifest template: no sha256 for %s", mp.Archive())
		}
		out = bytes.Replace(out, []byte(SHA256Placeholder), []byte(sum), 1)
	}
	if bytes.Contains(out, []byte("{{")) {
		return nil, fmt.Errorf("krew manifest template: placeholder left after rendering")
	}
	rendered, err := ParseManifest(out)
	if err != nil {
		return nil, fmt.Errorf("rendered manifest: %w", err)
	}
	for i, mp := range rendered.Spec.Platforms {
		if want := sums[mp.Archive()]; mp.SHA256 != want {
			return nil, fmt.Errorf("rendered manifest: spec.platforms[%d].sha256 is %s, want %s", i, mp.SHA256, want)
		}
	}
	return out, nil
}

func stripLeadingComment(data []byte) []byte {
	for len(data) > 0 && (data[0] == '#' || data[0] == '\n') {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			return nil
		}
		data = data[nl+1:]
	}
	return data
}
