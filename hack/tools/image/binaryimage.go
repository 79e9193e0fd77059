package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// runPause writes the node tier's sandbox image: the static binary of ./pause as /pause, for the
// machine's own architecture, as a tarball `ctr images import` reads.
func runPause(args []string) error {
	fl := flag.NewFlagSet("pause", flag.ContinueOnError)
	bin := fl.String("bin", "", "the static pause binary")
	out := fl.String("out", "", "the image tarball to write")
	ref := fl.String("name", "registry.local/pause:1", "the image reference containerd stores it under")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *bin == "" || *out == "" {
		return errors.New("-bin and -out are required")
	}
	data, err := os.ReadFile(*bin)
	if err != nil {
		return err
	}
	layerData, err := layerTar(imageEpoch, []entry{{name: "pause", mode: 0o755, data: data}})
	if err != nil {
		return err
	}
	layer, err := staticLayer(layerData)
	if err != nil {
		return err
	}
	cfg := v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535", WorkingDir: "/"}
	return writeBinaryImage(*ref, *out, layer, cfg)
}

// runComponent writes the image of one control-plane component for the kubeadm tier: the static
// binary under /usr/local/bin, where the PATH finds it, since kubeadm's static pod manifests name
// the command (`etcd`, `kube-apiserver`) and no entrypoint. The layer stays uncompressed: these
// images never leave the machine, and three nodes importing a 120 MB binary would otherwise spend
// both cores on gzip.
func runComponent(args []string) error {
	fl := flag.NewFlagSet("component", flag.ContinueOnError)
	bin := fl.String("bin", "", "the static binary of the component")
	out := fl.String("out", "", "the image tarball to write")
	ref := fl.String("name", "", "the image reference kubeadm's manifests name, e.g. registry.k8s.io/etcd:3.7.3-0")
	command := fl.String("command", "", "the binary's name in the image, the command the manifests run (default: its file name)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *bin == "" || *out == "" || *ref == "" {
		return errors.New("-bin, -out and -name are required")
	}
	data, err := os.ReadFile(*bin)
	if err != nil {
		return err
	}
	if *command == "" {
		*command = path.Base(*bin)
	}
	layerData, err := layerTar(imageEpoch, []entry{
		{name: "tmp/", mode: 0o1777},
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
		{name: "usr/local/bin/" + *command, mode: 0o755, data: data},
	})
	if err != nil {
		return err
	}
	cfg := v1.Config{
		Env:        []string{"PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		User:       "0:0",
		WorkingDir: "/",
	}
	return writeBinaryImage(*ref, *out, static.NewLayer(layerData, types.OCIUncompressedLayer), cfg)
}

// imageEpoch is the creation time of the images built from one binary, so that their digests
// depend only on the binary.
var imageEpoch = time.Unix(0, 0).UTC()

// writeBinaryImage writes a one-layer image for the machine's own architecture as a tarball that
// `ctr images import` reads, under ref.
func writeBinaryImage(ref, out string, layer v1.Layer, cfg v1.Config) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image name: %w", err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      v1.Time{Time: imageEpoch},
		RootFS:       v1.RootFS{Type: "layers"},
		Config:       cfg,
	})
	if err != nil {
		return err
	}
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, tag, img); err != nil {
		return fmt.Errorf("image %s: %w", out, err)
	}
	return nil
}
