package release

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestKrewVersion(t *testing.T) {
	for stamped, want := range map[string]string{
		"v1.2.3":                  "v1.2.3",
		"1.2.3":                   "v1.2.3",
		"v1.2.3-rc.1":             "v1.2.3-rc.1",
		"v1.2.3-4-gabcdef0-dirty": "v1.2.3-4-gabcdef0-dirty",
		"7281f66-dirty":           "v0.0.0-dev-7281f66-dirty",
		"0123456":                 "v0.0.0-dev-0123456",
		"v1.2":                    "v0.0.0-dev-v1-2",
		"dev":                     "v0.0.0-dev",
		"":                        "v0.0.0-dev",
	} {
		got := KrewVersion(stamped)
		if got != want {
			t.Errorf("KrewVersion(%q) = %q, want %q", stamped, got, want)
		}
		if !IsKrewVersion(got) {
			t.Errorf("KrewVersion(%q) = %q, which krew would refuse", stamped, got)
		}
	}
}

func TestWriteArchiveIsDeterministicAndNormalized(t *testing.T) {
	files := []File{
		{Name: Completion, Mode: 0o755, Data: []byte("#!/bin/sh\n")},
		{Name: Binary, Mode: 0o755, Data: bytes.Repeat([]byte("x"), 1<<16)},
		{Name: License, Mode: 0o644, Data: []byte("license\n")},
	}
	for _, name := range []string{"a.tar.gz", "a.zip"} {
		mtime := time.Unix(1700000000, 0)
		var first, second bytes.Buffer
		if err := WriteArchive(&first, name, files, mtime); err != nil {
			t.Fatal(err)
		}
		// A different order in and a different zone must not change a byte.
		reversed := []File{files[2], files[0], files[1]}
		if err := WriteArchive(&second, name, reversed, mtime.In(time.FixedZone("X", 3600))); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first.Bytes(), second.Bytes()) {
			t.Errorf("%s: two writes of the same files differ", name)
		}
		entries, err := ReadArchive(bytes.NewReader(first.Bytes()), int64(first.Len()), name)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name)
			if !e.ModTime.Equal(mtime) {
				t.Errorf("%s: %s has mtime %s, want %s", name, e.Name, e.ModTime, mtime)
			}
			if e.UID != 0 || e.GID != 0 || e.Uname != "" || e.Gname != "" {
				t.Errorf("%s: %s owned by %d:%d (%q:%q), want 0:0 without names", name, e.Name, e.UID, e.GID, e.Uname, e.Gname)
			}
		}
		if got := strings.Join(names, ","); got != "LICENSE,kubectl-etcdmember,kubectl_complete-etcdmember" {
			t.Errorf("%s: entries %s, want sorted", name, got)
		}
		if entries[1].Mode != 0o755 || entries[0].Mode != 0o644 {
			t.Errorf("%s: modes %v, %v", name, entries[0].Mode, entries[1].Mode)
		}
	}
}

func TestZipTimeIsClampedTo1980(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteArchive(&buf, "a.zip", []File{{Name: License, Mode: 0o644}}, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	entries, err := ReadArchive(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "a.zip")
	if err != nil {
		t.Fatal(err)
	}
	if !entries[0].ModTime.Equal(zipEpoch) {
		t.Errorf("mtime %s, want %s", entries[0].ModTime, zipEpoch)
	}
}

func template(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "krew-manifest.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func fakeSums() map[string]string {
	sums := map[string]string{}
	for i, p := range Platforms {
		sums[p.ArchiveName()] = strings.Repeat(string(rune('a'+i)), 64)
	}
	return sums
}

func TestRenderManifest(t *testing.T) {
	out, err := RenderManifest(template(t), "v1.2.3", fakeSums())
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.Spec.Version != "v1.2.3" {
		t.Errorf("spec.version %q", m.Spec.Version)
	}
	for _, mp := range m.Spec.Platforms {
		if mp.SHA256 != fakeSums()[mp.Archive()] {
			t.Errorf("%s: sha256 %s", mp.Archive(), mp.SHA256)
		}
		if want := "https://github.com/etcdmember/kubectl-etcdmember/releases/download/v1.2.3/" + mp.Archive(); mp.URI != want {
			t.Errorf("uri %s, want %s", mp.URI, want)
		}
	}
	if bytes.HasPrefix(out, []byte("#")) {
		t.Errorf("the template's comment about placeholders is left in the output")
	}
	if n := len(m.Spec.ShortDescription); n > 50 {
		t.Errorf("shortDescription is %d characters; the krew index asks for at most 50", n)
	}
}

func TestRenderManifestRefuses(t *testing.T) {
	tmpl := template(t)
	sums := fakeSums()
	delete(sums, Platforms[0].ArchiveName())
	if _, err := RenderManifest(tmpl, "v1.2.3", sums); err == nil {
		t.Error("rendered without the sum of an archive")
	}
	if _, err := RenderManifest(tmpl, "1.2.3", fakeSums()); err == nil {
		t.Error("rendered a version without a leading v")
	}
	extra := append(bytes.Clone(tmpl), []byte("# {{sha256}}\n")...)
	if _, err := RenderManifest(extra, "v1.2.3", fakeSums()); err == nil {
		t.Error("rendered a template with a stray sha256 placeholder")
	}
	typo := bytes.Replace(tmpl, []byte("shortDescription:"), []byte("shortDescripton:"), 1)
	if _, err := RenderManifest(typo, "v1.2.3", fakeSums()); err == nil {
		t.Error("rendered a template with an unknown field")
	}
}
