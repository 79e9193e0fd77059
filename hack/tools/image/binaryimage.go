package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
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
	tag, err := name.NewTag(*ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image name: %w", err)
	}
	data, err := os.ReadFile(*bin)
	if err != nil {
		return err
	}
	epoch := time.Unix(0, 0).UTC()
	layerData, err := layerTar(epoch, []entry{{name: "pause", mode: 0o755, data: data}})
	if err != nil {
		return err
	}
	layer, err := staticLayer(layerData)
	if err != nil {
		return err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      v1.Time{Time: epoch},
		RootFS:       v1.RootFS{Type: "layers"},
		Config:       v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535", WorkingDir: "/"},
	})
	if err != nil {
		return err
	}
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(*out, tag, img); err != nil {
		return fmt.Errorf("pause image %s: %w", *out, err)
	}
	return nil
}
