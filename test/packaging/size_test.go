package packaging

import (
	"os"
	"strings"
	"testing"

	"github.com/etcdmember/kubectl-etcdmember/hack/dist/release"
)

// maxDownload is the most an archive or an image tarball may weigh: every `kubectl krew install`
// and every image pull pays it. Stripped (-s -w) they weigh 19.1 to 22.1 MiB today (windows the
// most); an unstripped build is about twice that and fails here, as does growth of a sixth.
const maxDownload = 27 << 20

// TestDownloadsAreStrippedAndSmall weighs every archive of make dist and both image tarballs of
// make image, and checks that each shipped binary carries no symbol table of our code (the build
// info stays: TestArchivesHoldWhatTheManifestPromises reads it).
func TestDownloadsAreStrippedAndSmall(t *testing.T) {
	for _, p := range release.Platforms {
		path := Need(t, "dist/"+p.ArchiveName(), "dist")
		checkSize(t, path)
		bin := readArchive(t, p)[p.BinaryName()].Data
		if syms, err := ourSymbols(p, bin); err != nil {
			t.Errorf("%s: %v", p.ArchiveName(), err)
		} else if len(syms) > 0 {
			t.Errorf("%s: %s is not stripped: %d symbols of our code, e.g. %s (build with -ldflags -s -w)", p.ArchiveName(), p.BinaryName(), len(syms), syms[0])
		}
	}
	for _, arch := range []string{"amd64", "arm64"} {
		checkSize(t, Need(t, "dist/image_linux_"+arch+".tar", "image"))
	}
}

func checkSize(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %.1f MiB", path, float64(fi.Size())/(1<<20))
	if fi.Size() > maxDownload {
		t.Errorf("%s weighs %.1f MiB, over the %d MiB ceiling: was it built stripped (-s -w)?", path, float64(fi.Size())/(1<<20), maxDownload>>20)
	}
}

// ourSymbols are the names in a binary's symbol table that belong to this module: none once
// stripped.
func ourSymbols(p release.Platform, data []byte) ([]string, error) {
	img, err := parseBinary(p, data)
	if err != nil {
		return nil, err
	}
	var ours []string
	for _, name := range img.symbols {
		if strings.Contains(name, modulePath) {
			ours = append(ours, name)
		}
	}
	return ours, nil
}
