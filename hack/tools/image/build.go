package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	binary = "kubectl-etcdmember"
	// nonroot is distroless's unprivileged user; a numeric user needs no lookup in /etc/passwd,
	// so Kubernetes' runAsNonRoot check can verify it from the image config alone.
	nonroot = 65532
)

type buildOptions struct {
	dist      string
	out       string
	repo      string
	version   string
	mtime     time.Time
	platforms []string
}

func runBuild(args []string) error {
	fl := flag.NewFlagSet("build", flag.ContinueOnError)
	var o buildOptions
	var mtime int64
	var platforms string
	fl.StringVar(&o.dist, "dist", "dist", "directory holding kubectl-etcdmember_linux_<arch>.tar.gz")
	fl.StringVar(&o.out, "out", "", "output directory (default: -dist)")
	fl.StringVar(&o.repo, "repo", "ghcr.io/etcdmember/kubectl-etcdmember", "image repository the tag names")
	fl.StringVar(&o.version, "version", "", "the release version, for the tag and the labels")
	fl.Int64Var(&mtime, "mtime", 0, "creation time and file mtimes in Unix seconds (the Makefile passes $SOURCE_DATE_EPOCH, the commit time)")
	fl.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated linux platforms")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if o.version == "" {
		return errors.New("-version is required")
	}
	if o.out == "" {
		o.out = o.dist
	}
	o.mtime = time.Unix(mtime, 0).UTC()
	o.platforms = strings.Split(platforms, ",")
	return build(&o)
}

func build(o *buildOptions) error {
	tag, err := name.NewTag(o.repo+":"+dockerTag(o.version), name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image tag: %w", err)
	}
	var adds []mutate.IndexAddendum
	images := map[string]v1.Image{}
	for _, p := range o.platforms {
		osName, arch, ok := strings.Cut(p, "/")
		if !ok || osName != "linux" {
			return fmt.Errorf("platform %q: the agent image is linux/<arch> only", p)
		}
		archive := filepath.Join(o.dist, fmt.Sprintf("%s_linux_%s.tar.gz", binary, arch))
		files, err := readTarGz(archive)
		if err != nil {
			return fmt.Errorf("%w (run make dist)", err)
		}
		img, err := image(o, arch, files)
		if err != nil {
			return fmt.Errorf("image %s: %w", p, err)
		}
		images[arch] = img
		adds = append(adds, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)

	dir := filepath.Join(o.out, "image")
	// layout.Write only adds to an existing layout; a fresh directory keeps old builds out of it.
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("oci layout: %w", err)
	}
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("oci layout: %w", err)
	}
	// The ref.name annotation is what `skopeo copy oci:dist/image:<tag>` and `docker load` of a
	// tar of this directory look the image up by, as in the layout `docker buildx` exports.
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
		"io.containerd.image.name":          tag.Name(),
	})); err != nil {
		return fmt.Errorf("oci layout: %w", err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return fmt.Errorf("oci layout: %w", err)
	}
	fmt.Fprintf(os.Stderr, "imagebuild: %s %s -> %s\n", tag.Name(), digest, dir)

	for _, p := range o.platforms {
		arch := strings.TrimPrefix(p, "linux/")
		path := filepath.Join(o.out, "image_linux_"+arch+".tar")
		if err := tarball.WriteToFile(path, tag, images[arch]); err != nil {
			return fmt.Errorf("docker tarball %s: %w", path, err)
		}
		fmt.Fprintf(os.Stderr, "imagebuild: %s (docker load -i %s)\n", tag.Name(), path)
	}
	return nil
}

func image(o *buildOptions, arch string, files map[string][]byte) (v1.Image, error) {
	bin, ok := files[binary]
	if !ok {
		return nil, fmt.Errorf("the archive holds no %s", binary)
	}
	license, ok := files["LICENSE"]
	if !ok {
		return nil, errors.New("the archive holds no LICENSE")
	}
	// The base layer is identical for every architecture, so registries and the layout store it once.
	baseTar, err := layerTar(o.mtime, []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, owner: nonroot},
		{name: "tmp/", mode: 0o1777},
		{name: "usr/", mode: 0o755},
		{name: "usr/share/", mode: 0o755},
		{name: "usr/share/doc/", mode: 0o755},
		{name: "usr/share/doc/" + binary + "/", mode: 0o755},
		{name: "usr/share/doc/" + binary + "/LICENSE", mode: 0o644, data: license},
	})
	if err != nil {
		return nil, err
	}
	binTar, err := layerTar(o.mtime, []entry{{name: binary, mode: 0o755, data: bin}})
	if err != nil {
		return nil, err
	}
	baseLayer, err := staticLayer(baseTar)
	if err != nil {
		return nil, err
	}
	binLayer, err := staticLayer(binTar)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.mtime}
	cfg := &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Created:      created,
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			// No shell in the image: the exec form is the only one that works.
			Entrypoint: []string{"/" + binary, "serve"},
			User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
			WorkingDir: "/",
			Env:        []string{"HOME=/home/nonroot"},
			Labels: map[string]string{
				"org.opencontainers.image.title":       binary,
				"org.opencontainers.image.description": "etcdmember node agent (kubectl-etcdmember serve)",
				"org.opencontainers.image.source":      "https://github.com/etcdmember/kubectl-etcdmember",
				"org.opencontainers.image.version":     o.version,
				"org.opencontainers.image.licenses":    "Apache-2.0",
			},
		},
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Append(img,
		mutate.Addendum{
			Layer:   baseLayer,
			History: v1.History{Created: created, CreatedBy: "imagebuild: /etc/passwd, /etc/group, /home/nonroot, /tmp, LICENSE"},
		},
		mutate.Addendum{
			Layer:   binLayer,
			History: v1.History{Created: created, CreatedBy: "imagebuild: /" + binary},
		},
	)
}

func staticLayer(data []byte) (v1.Layer, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return layer, nil
}

type entry struct {
	name  string
	mode  int64
	owner int
	data  []byte
}

// layerTar writes entries in the order given (parents before children), owned by root unless
// stated, with one mtime and no user names, so the layer digest depends only on the contents.
func layerTar(mtime time.Time, entries []entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.owner,
			Gid:     e.owner,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if strings.HasSuffix(e.name, "/") {
			hdr.Typeflag = tar.TypeDir
		} else {
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("layer %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("layer %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return buf.Bytes(), nil
}

func readTarGz(path string) (map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		files[hdr.Name] = data
	}
}

var notTag = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// dockerTag maps a version to a valid tag: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}; git describe
// output already is one, except for a build's "+metadata".
func dockerTag(version string) string {
	t := notTag.ReplaceAllString(version, "-")
	t = strings.TrimLeft(t, ".-")
	if t == "" {
		t = "dev"
	}
	if len(t) > 128 {
		t = t[:128]
	}
	return t
}
