package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Report is what inspect prints. test/packaging decodes it; keep the field names stable.
type Report struct {
	Refs      []string      `json:"refs"`
	MediaType string        `json:"mediaType,omitempty"`
	Images    []ImageReport `json:"images"`
}

// ImageReport describes one platform's image.
type ImageReport struct {
	Platform  string        `json:"platform"`
	Digest    string        `json:"digest"`
	MediaType string        `json:"mediaType"`
	Created   time.Time     `json:"created"`
	Config    v1.Config     `json:"config"`
	Layers    []LayerReport `json:"layers"`
}

// LayerReport lists a layer's entries.
type LayerReport struct {
	Digest    string       `json:"digest"`
	MediaType string       `json:"mediaType"`
	Files     []FileReport `json:"files"`
}

// FileReport is one tar entry; Name is absolute, as the container sees it.
type FileReport struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Mode int64  `json:"mode"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	Size int64  `json:"size"`
}

type inspectOptions struct {
	layout, tarball string
	platform        string
	extract, to     string
}

func runInspect(args []string, stdout io.Writer) error {
	fl := flag.NewFlagSet("inspect", flag.ContinueOnError)
	var o inspectOptions
	fl.StringVar(&o.layout, "layout", "", "an OCI layout directory (dist/image)")
	fl.StringVar(&o.tarball, "tarball", "", "a docker-loadable tarball (dist/image_linux_<arch>.tar)")
	fl.StringVar(&o.platform, "platform", "", "with -extract: the os/arch image to extract from")
	fl.StringVar(&o.extract, "extract", "", "absolute path of a file in the image to copy out")
	fl.StringVar(&o.to, "to", "", "with -extract: where to write it (mode 0755)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if (o.layout == "") == (o.tarball == "") {
		return errors.New("give exactly one of -layout and -tarball")
	}
	if o.extract != "" && o.to == "" {
		return errors.New("-extract needs -to")
	}
	var report Report
	var images []v1.Image
	var err error
	if o.layout != "" {
		report, images, err = readLayout(o.layout)
	} else {
		report, images, err = readTarball(o.tarball)
	}
	if err != nil {
		return err
	}
	extracted := false
	for i, img := range images {
		r, err := describe(img)
		if err != nil {
			return err
		}
		report.Images = append(report.Images, r)
		if o.extract != "" && (o.platform == "" || o.platform == r.Platform) && !extracted {
			if err := extract(images[i], o.extract, o.to); err != nil {
				return fmt.Errorf("image %s: %w", r.Platform, err)
			}
			extracted = true
		}
	}
	if o.extract != "" && !extracted {
		return fmt.Errorf("no image for platform %q", o.platform)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(report)
}

func readLayout(dir string) (Report, []v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return Report{}, nil, fmt.Errorf("oci layout %s: %w", dir, err)
	}
	top, err := idx.IndexManifest()
	if err != nil {
		return Report{}, nil, fmt.Errorf("oci layout %s: %w", dir, err)
	}
	var report Report
	var images []v1.Image
	for _, desc := range top.Manifests {
		if ref := desc.Annotations["org.opencontainers.image.ref.name"]; ref != "" {
			report.Refs = append(report.Refs, ref)
		}
		if !desc.MediaType.IsIndex() {
			img, err := idx.Image(desc.Digest)
			if err != nil {
				return Report{}, nil, fmt.Errorf("oci layout %s: %w", dir, err)
			}
			images = append(images, img)
			continue
		}
		inner, err := idx.ImageIndex(desc.Digest)
		if err != nil {
			return Report{}, nil, fmt.Errorf("oci layout %s: %w", dir, err)
		}
		report.MediaType = string(desc.MediaType)
		im, err := inner.IndexManifest()
		if err != nil {
			return Report{}, nil, fmt.Errorf("oci layout %s: %w", dir, err)
		}
		for _, d := range im.Manifests {
			img, err := inner.Image(d.Digest)
			if err != nil {
				return Report{}, nil, fmt.Errorf("oci layout %s: %w", dir, err)
			}
			images = append(images, img)
		}
	}
	return report, images, nil
}

func readTarball(file string) (Report, []v1.Image, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(file) }
	manifest, err := tarball.LoadManifest(opener)
	if err != nil {
		return Report{}, nil, fmt.Errorf("docker tarball %s: %w", file, err)
	}
	var report Report
	var images []v1.Image
	for _, d := range manifest {
		report.Refs = append(report.Refs, d.RepoTags...)
		if len(d.RepoTags) == 0 {
			return Report{}, nil, fmt.Errorf("docker tarball %s: an image without a tag", file)
		}
		tag, err := nameTag(d.RepoTags[0])
		if err != nil {
			return Report{}, nil, err
		}
		img, err := tarball.Image(opener, &tag)
		if err != nil {
			return Report{}, nil, fmt.Errorf("docker tarball %s: %w", file, err)
		}
		images = append(images, img)
	}
	return report, images, nil
}

func describe(img v1.Image) (ImageReport, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return ImageReport{}, fmt.Errorf("config: %w", err)
	}
	digest, err := img.Digest()
	if err != nil {
		return ImageReport{}, fmt.Errorf("digest: %w", err)
	}
	mt, err := img.MediaType()
	if err != nil {
		return ImageReport{}, fmt.Errorf("media type: %w", err)
	}
	r := ImageReport{
		Platform:  cfg.OS + "/" + cfg.Architecture,
		Digest:    digest.String(),
		MediaType: string(mt),
		Created:   cfg.Created.UTC(),
		Config:    cfg.Config,
	}
	layers, err := img.Layers()
	if err != nil {
		return ImageReport{}, fmt.Errorf("layers: %w", err)
	}
	for _, l := range layers {
		lr, err := describeLayer(l)
		if err != nil {
			return ImageReport{}, err
		}
		r.Layers = append(r.Layers, lr)
	}
	return r, nil
}

func describeLayer(l v1.Layer) (LayerReport, error) {
	digest, err := l.Digest()
	if err != nil {
		return LayerReport{}, fmt.Errorf("layer digest: %w", err)
	}
	mt, err := l.MediaType()
	if err != nil {
		return LayerReport{}, fmt.Errorf("layer %s: %w", digest, err)
	}
	lr := LayerReport{Digest: digest.String(), MediaType: string(mt)}
	err = walkLayer(l, func(hdr *tar.Header, _ io.Reader) error {
		kind := "other"
		switch hdr.Typeflag {
		case tar.TypeReg:
			kind = "file"
		case tar.TypeDir:
			kind = "dir"
		case tar.TypeSymlink:
			kind = "symlink"
		}
		lr.Files = append(lr.Files, FileReport{
			Name: absolute(hdr.Name), Type: kind, Mode: hdr.Mode, UID: hdr.Uid, GID: hdr.Gid, Size: hdr.Size,
		})
		return nil
	})
	if err != nil {
		return LayerReport{}, fmt.Errorf("layer %s: %w", digest, err)
	}
	return lr, nil
}

// extract copies the last layer's version of file, as the container's filesystem would show it.
func extract(img v1.Image, file, to string) error {
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("layers: %w", err)
	}
	want := absolute(file)
	for i := len(layers) - 1; i >= 0; i-- {
		found := false
		err := walkLayer(layers[i], func(hdr *tar.Header, r io.Reader) error {
			if found || absolute(hdr.Name) != want || hdr.Typeflag != tar.TypeReg {
				return nil
			}
			found = true
			f, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, r); err != nil {
				_ = f.Close()
				return err
			}
			return f.Close()
		})
		if err != nil {
			return fmt.Errorf("extract %s: %w", file, err)
		}
		if found {
			return nil
		}
	}
	return fmt.Errorf("no layer holds %s", file)
}

func walkLayer(l v1.Layer, fn func(*tar.Header, io.Reader) error) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(hdr, tr); err != nil {
			return err
		}
	}
}

func absolute(name string) string { return path.Clean("/" + name) }

func nameTag(s string) (name.Tag, error) {
	tag, err := name.NewTag(s)
	if err != nil {
		return name.Tag{}, fmt.Errorf("tag %q: %w", s, err)
	}
	return tag, nil
}
