package packaging

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/hack/dist/release"
	"github.com/etcdmember/kubectl-etcdmember/test/framework"
)

var lowerSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// readRendered parses dist/etcdmember.yaml and fails, asking for make dist, when it was built for
// another version of the tree.
func readRendered(t *testing.T) *release.Manifest {
	t.Helper()
	data, err := os.ReadFile(Need(t, "dist/"+release.ManifestName, "dist"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := release.ParseManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	if want := release.KrewVersion(ExpectedVersion(t)); m.Spec.Version != want {
		t.Fatalf("dist/%s is for version %s, the tree is %s: run make dist", release.ManifestName, m.Spec.Version, want)
	}
	return m
}

func TestRenderedManifestPassesKrewValidation(t *testing.T) {
	validate := Need(t, "bin/validate-krew-manifest", "krew")
	manifest := Need(t, "dist/"+release.ManifestName, "dist")
	m := readRendered(t)
	Run(t, os.Environ(), time.Minute, validate, "-manifest", manifest, "-skip-install")

	for _, p := range m.Spec.Platforms {
		if !lowerSHA256.MatchString(p.SHA256) {
			t.Errorf("%s: sha256 %q is not lowercase hex", p.Archive(), p.SHA256)
		}
		data, err := os.ReadFile(Need(t, "dist/"+p.Archive(), "dist"))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != p.SHA256 {
			t.Errorf("%s: manifest says sha256 %s, the archive has %x: run make dist", p.Archive(), p.SHA256, sum)
		}
		want := "https://github.com/etcdmember/kubectl-etcdmember/releases/download/" + m.Spec.Version + "/" + p.Archive()
		if p.URI != want {
			t.Errorf("uri %s, want %s", p.URI, want)
		}
	}
}

func TestKrewInstallsThePluginForKubectl(t *testing.T) {
	pathDir := KrewInstall(t)
	kubectlDir := KubectlDir(t)
	env := Env(t, pathDir, kubectlDir)
	kubectl := filepath.Join(kubectlDir, "kubectl")

	list := Run(t, env, time.Minute, kubectl, "plugin", "list")
	if want := filepath.Join(pathDir, release.Binary); !strings.Contains(list, want) {
		t.Errorf("kubectl plugin list does not show %s:\n%s", want, list)
	}
	out := Run(t, env, time.Minute, kubectl, "etcdmember", "version")
	if want := ExpectedVersion(t); !strings.Contains(out, want) {
		t.Errorf("kubectl etcdmember version printed %q, want the stamped %s (run make dist if the tree changed)", out, want)
	}

	// files[] must have put the license and the completion script next to the binary.
	store := filepath.Join(filepath.Dir(pathDir), "store", release.PluginName, readRendered(t).Spec.Version)
	for _, name := range HostPlatform().Files() {
		if _, err := os.Stat(filepath.Join(store, name)); err != nil {
			t.Errorf("krew did not install %s: %v", name, err)
		}
	}
	if HostPlatform().OS == "windows" {
		return
	}
	// With the script from krew's store on PATH, as the caveats tell users, kubectl completes the
	// plugin's subcommands. The script runs through `env sh`, hence the system directories.
	env = Env(t, pathDir, store, kubectlDir, "/usr/bin", "/bin")
	if out := Run(t, env, time.Minute, kubectl, "__complete", "etcdmember", ""); !strings.Contains(out, "version") {
		t.Errorf("kubectl __complete etcdmember does not offer the version subcommand:\n%s", out)
	}
}

func TestGoInstallIsFoundByKubectl(t *testing.T) {
	gobin := t.TempDir()
	// CGO_ENABLED=0 and -trimpath are what make dist builds with, so go install links from the
	// packages already in the build cache instead of compiling the module again; what this checks,
	// the name go install gives the binary and that kubectl runs it as a plugin, does not depend on them.
	env := append(os.Environ(), "GOBIN="+gobin, "CGO_ENABLED=0")
	Run(t, env, 10*time.Minute, "go", "install", "-trimpath", ".")
	bin := filepath.Join(gobin, HostPlatform().BinaryName())
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("go install . wrote no %s: %v", bin, err)
	}

	kubectlDir := KubectlDir(t)
	env = Env(t, gobin, kubectlDir)
	kubectl := filepath.Join(kubectlDir, "kubectl")
	if list := Run(t, env, time.Minute, kubectl, "plugin", "list"); !strings.Contains(list, bin) {
		t.Errorf("kubectl plugin list does not show %s:\n%s", bin, list)
	}
	out := Run(t, env, time.Minute, kubectl, "etcdmember", "version")
	if strings.TrimSpace(out) == "" {
		t.Error("kubectl etcdmember version printed nothing")
	}
	t.Logf("version of a go install build: %s", strings.TrimSpace(out))
}

// inspectReport mirrors the JSON of `imagebuild inspect`.
type inspectReport struct {
	Refs   []string `json:"refs"`
	Images []struct {
		Platform string    `json:"platform"`
		Created  time.Time `json:"created"`
		Config   struct {
			Entrypoint []string
			Cmd        []string
			User       string
		} `json:"config"`
		Layers []struct {
			Digest string `json:"digest"`
			Files  []struct {
				Name string `json:"name"`
				Type string `json:"type"`
				Mode int64  `json:"mode"`
			} `json:"files"`
		} `json:"layers"`
	} `json:"images"`
}

func inspect(t *testing.T, args ...string) inspectReport {
	t.Helper()
	imagebuild := Need(t, "bin/imagebuild", "image")
	cmd := exec.Command(imagebuild, append([]string{"inspect"}, args...)...)
	cmd.Dir = RepoRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("imagebuild inspect %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var r inspectReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("imagebuild inspect: %v\n%s", err, out)
	}
	return r
}

func checkImages(t *testing.T, r inspectReport, platforms []string) {
	t.Helper()
	var got []string
	for _, img := range r.Images {
		got = append(got, img.Platform)
		if want := []string{"/" + release.Binary, "serve"}; !slices.Equal(img.Config.Entrypoint, want) || len(img.Config.Cmd) != 0 {
			t.Errorf("%s: entrypoint %q cmd %q, want %q and no cmd", img.Platform, img.Config.Entrypoint, img.Config.Cmd, want)
		}
		user, _, _ := strings.Cut(img.Config.User, ":")
		if user == "" || user == "0" || user == "root" {
			t.Errorf("%s: runs as user %q, want a non-root one", img.Platform, img.Config.User)
		}
		binaryLayer := false
		for _, l := range img.Layers {
			for _, f := range l.Files {
				if f.Name == "/"+release.Binary && f.Type == "file" && f.Mode&0o111 != 0 {
					binaryLayer = true
				}
				if strings.HasPrefix(f.Name, "/bin/") || strings.HasSuffix(f.Name, "/sh") {
					t.Errorf("%s: layer %s holds %s; the image has no shell", img.Platform, l.Digest, f.Name)
				}
			}
		}
		if !binaryLayer {
			t.Errorf("%s: no layer holds an executable /%s", img.Platform, release.Binary)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, platforms) {
		t.Errorf("image platforms %v, want %v", got, platforms)
	}
}

func TestImageRunsTheStampedBinaryAsNonRoot(t *testing.T) {
	layout := Need(t, "dist/image", "image")
	var platforms []string
	for _, p := range release.Platforms {
		if p.OS == "linux" {
			platforms = append(platforms, p.String())
		}
	}
	slices.Sort(platforms)

	host := HostPlatform()
	extracted := filepath.Join(t.TempDir(), release.Binary)
	args := []string{"-layout", layout}
	if host.OS == "linux" {
		args = append(args, "-platform", host.String(), "-extract", "/"+release.Binary, "-to", extracted)
	}
	r := inspect(t, args...)
	if len(r.Refs) == 0 {
		t.Error("the OCI layout names no tag (org.opencontainers.image.ref.name)")
	}
	checkImages(t, r, platforms)

	for _, p := range platforms {
		tarball := Need(t, "dist/image_"+strings.ReplaceAll(p, "/", "_")+".tar", "image")
		tr := inspect(t, "-tarball", tarball)
		if len(tr.Refs) != 1 || !strings.Contains(tr.Refs[0], ":") {
			t.Errorf("%s: repo tags %v, want one repo:tag for docker load", tarball, tr.Refs)
		}
		checkImages(t, tr, []string{p})
	}

	if host.OS != "linux" {
		t.Logf("the image's binary is for linux; %s cannot run it, so only its layout was checked", host)
		return
	}
	// The image must carry exactly the binary of the release archive.
	entries := readArchive(t, host)
	image, err := os.ReadFile(extracted)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(image, entries[host.BinaryName()].Data) {
		t.Errorf("the image's /%s differs from the one in %s: run make image", release.Binary, host.ArchiveName())
	}
	want := ExpectedVersion(t)
	var outputs []string
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(extracted, args...).CombinedOutput()
		if err == nil && strings.Contains(string(out), want) {
			return
		}
		outputs = append(outputs, fmt.Sprintf("%s: %v: %s", args[0], err, out))
	}
	t.Errorf("the image's binary does not print version %s:\n%s", want, strings.Join(outputs, "\n"))
}

func TestDistIsReproducible(t *testing.T) {
	root := RepoRoot(t)
	var names []string
	for _, p := range release.Platforms {
		names = append(names, p.ArchiveName())
	}
	names = append(names, release.ManifestName, "checksums.txt")
	for _, name := range names {
		Need(t, "dist/"+name, "dist")
	}
	again := t.TempDir()
	// Its build log goes beside the second dist, not over the first's in bin/logs.
	Run(t, os.Environ(), 15*time.Minute, "make", "-C", root, "--no-print-directory", "dist", "DIST="+again, "STEP_LOGS="+again)
	for _, name := range names {
		first, err := os.ReadFile(filepath.Join(root, "dist", name))
		if err != nil {
			t.Fatal(err)
		}
		second, err := os.ReadFile(filepath.Join(again, name))
		if err != nil {
			t.Fatalf("make dist DIST=%s wrote no %s (does the Makefile include packaging.mk?): %v", again, name, err)
		}
		if !bytes.Equal(first, second) {
			t.Errorf("%s differs between two runs of make dist (or dist/ is stale: run make dist)", name)
		}
	}
}

// TestManifestAndDistAgree reads the platforms of krew-manifest.yaml and those hack/dist builds,
// and fails on any platform that only one of them has.
func TestManifestAndDistAgree(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(RepoRoot(t), "krew-manifest.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := release.ParseManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	inManifest := map[release.Platform]string{}
	for i, mp := range m.Spec.Platforms {
		p, err := mp.Platform()
		if err != nil {
			t.Fatalf("spec.platforms[%d]: %v", i, err)
		}
		inManifest[p] = mp.Archive()
	}
	built := map[release.Platform]string{}
	for _, p := range release.Platforms {
		built[p] = p.ArchiveName()
	}
	for p, archive := range inManifest {
		if want, ok := built[p]; !ok {
			t.Errorf("krew-manifest.yaml lists %s (%s), which hack/dist does not build", p, archive)
		} else if archive != want {
			t.Errorf("krew-manifest.yaml fetches %s for %s, hack/dist writes %s", archive, p, want)
		}
	}
	for p, archive := range built {
		if _, ok := inManifest[p]; !ok {
			t.Errorf("hack/dist builds %s, which krew-manifest.yaml does not list", archive)
		}
	}
	if err := release.CheckPlatforms(m); err != nil {
		t.Error(err)
	}
}

func TestDistHoldsOneArchivePerPlatform(t *testing.T) {
	dir := Need(t, "dist", "dist")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), release.Binary+"_") {
			got = append(got, e.Name())
		}
	}
	for _, p := range release.Platforms {
		want = append(want, p.ArchiveName())
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("dist/ holds %v, hack/dist builds %v", got, want)
	}
}

func readArchive(t *testing.T, p release.Platform) map[string]release.Entry {
	t.Helper()
	data, err := os.ReadFile(Need(t, "dist/"+p.ArchiveName(), "dist"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := release.ReadArchive(bytes.NewReader(data), int64(len(data)), p.ArchiveName())
	if err != nil {
		t.Fatalf("%s: %v", p.ArchiveName(), err)
	}
	byName := map[string]release.Entry{}
	var names []string
	for _, e := range entries {
		byName[e.Name] = e
		names = append(names, e.Name)
	}
	if !slices.Equal(names, p.Files()) {
		t.Fatalf("%s holds %v, want %v in this order", p.ArchiveName(), names, p.Files())
	}
	return byName
}

// TestArchivesHoldWhatTheManifestPromises opens every archive: the files the manifest names, with
// fixed owners, modes and one mtime, and a binary for the archive's platform, built as the
// Makefile says (CGO_ENABLED=0, -trimpath, the version stamped).
func TestArchivesHoldWhatTheManifestPromises(t *testing.T) {
	root := RepoRoot(t)
	license, err := os.ReadFile(filepath.Join(root, release.License))
	if err != nil {
		t.Fatal(err)
	}
	completion, err := os.ReadFile(filepath.Join(root, release.Completion))
	if err != nil {
		t.Fatalf("the completion script every non-Windows archive ships: %v", err)
	}
	version := ExpectedVersion(t)
	for _, p := range release.Platforms {
		entries := readArchive(t, p)
		var mtime time.Time
		for name, e := range entries {
			if e.UID != 0 || e.GID != 0 || e.Uname != "" || e.Gname != "" {
				t.Errorf("%s: %s owned by %d:%d (%s:%s), want 0:0 and no names", p.ArchiveName(), name, e.UID, e.GID, e.Uname, e.Gname)
			}
			if mtime.IsZero() {
				mtime = e.ModTime
			} else if !e.ModTime.Equal(mtime) {
				t.Errorf("%s: %s has mtime %s, the others %s", p.ArchiveName(), name, e.ModTime, mtime)
			}
		}
		if e := entries[release.License]; !bytes.Equal(e.Data, license) || e.Mode != 0o644 {
			t.Errorf("%s: LICENSE (mode %v) is not the repository's, 0644", p.ArchiveName(), e.Mode)
		}
		if e, ok := entries[release.Completion]; ok && (!bytes.Equal(e.Data, completion) || e.Mode != 0o755) {
			t.Errorf("%s: %s (mode %v) is not the repository's, 0755", p.ArchiveName(), release.Completion, e.Mode)
		}
		bin := entries[p.BinaryName()]
		if bin.Mode != 0o755 {
			t.Errorf("%s: %s has mode %v, want 0755", p.ArchiveName(), p.BinaryName(), bin.Mode)
		}
		checkBinary(t, p, bin.Data, version)
		checkNoFailpoints(t, p.ArchiveName()+": "+p.BinaryName(), bin.Data)
	}
}

func checkBinary(t *testing.T, p release.Platform, data []byte, version string) {
	t.Helper()
	var arch map[string]string
	switch p.OS {
	case "linux":
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Errorf("%s: not an ELF binary: %v", p, err)
			return
		}
		arch = map[string]string{elf.EM_X86_64.String(): "amd64", elf.EM_AARCH64.String(): "arm64"}
		if got := arch[f.Machine.String()]; got != p.Arch {
			t.Errorf("%s: ELF machine %s", p, f.Machine)
		}
	case "darwin":
		f, err := macho.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Errorf("%s: not a Mach-O binary: %v", p, err)
			return
		}
		arch = map[string]string{macho.CpuAmd64.String(): "amd64", macho.CpuArm64.String(): "arm64"}
		if got := arch[f.Cpu.String()]; got != p.Arch {
			t.Errorf("%s: Mach-O cpu %s", p, f.Cpu)
		}
	case "windows":
		f, err := pe.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Errorf("%s: not a PE binary: %v", p, err)
			return
		}
		if f.Machine != pe.IMAGE_FILE_MACHINE_AMD64 || p.Arch != "amd64" {
			t.Errorf("%s: PE machine %#x", p, f.Machine)
		}
	}
	info, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		t.Errorf("%s: build info: %v", p, err)
		return
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	for key, want := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": p.OS, "GOARCH": p.Arch} {
		if settings[key] != want {
			t.Errorf("%s: built with %s=%q, want %q", p, key, settings[key], want)
		}
	}
	if ok, err := stampsVersion(p, data, version); err != nil {
		t.Errorf("%s: looking for the stamped version: %v", p, err)
	} else if !ok {
		t.Errorf("%s: no string variable holds the version %q: run make dist", p, version)
	}
	if info.Path != modulePath {
		t.Errorf("%s: main package %s, want %s (the repository root)", p, info.Path, modulePath)
	}
}

// TestKrewInstalledPluginListsTheTestBed: the plugin as krew installs it, run by the real kubectl,
// lists the members of a real etcd cluster registered by a real agent.
func TestKrewInstalledPluginListsTheTestBed(t *testing.T) {
	t.Parallel()
	pathDir := KrewInstall(t)
	kubectlDir := KubectlDir(t)
	c := framework.NewCluster(t, framework.ClusterConfig{Size: 1})
	api := framework.StartAPIServer(t, c)
	api.InstallEtcdmember(t)
	framework.StartAgent(t, c.Member("node-1"), api)

	env := append(Env(t, pathDir, kubectlDir), "KUBECONFIG="+api.Kubeconfig())
	out := Run(t, env, time.Minute, filepath.Join(kubectlDir, "kubectl"), "etcdmember", "list", "--etcd-endpoints", c.Member("node-1").ClientURL())
	fields := strings.Fields(strings.Split(strings.TrimSpace(out), "\n")[1])
	if len(fields) < 3 || fields[0] != "node-1" || fields[1] != c.Member("node-1").IDHex() || fields[2] != c.Member("node-1").PeerURL() {
		t.Errorf("kubectl etcdmember list from krew's install:\n%s\nwant node-1 as member %s at %s", out, c.Member("node-1").IDHex(), c.Member("node-1").PeerURL())
	}
}
