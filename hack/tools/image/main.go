// Command imagebuild writes the node agent's container image from the linux release archives
// that `make dist` produced, without a Docker daemon or a base image: `imagebuild build` writes an
// OCI layout (a multi-platform index) and one docker-loadable tarball per platform; `imagebuild
// inspect` reads either back as JSON, and can extract a file, for test/packaging; `imagebuild pause`
// writes the sandbox image of the node tier's kubelets (test/framework), and `imagebuild component`
// the control-plane images of the kubeadm tier, which no registry serves here.
//
// It is a module of its own so that go-containerregistry never enters the root go.mod.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: imagebuild build|inspect|pause|component [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = runBuild(os.Args[2:])
	case "inspect":
		err = runInspect(os.Args[2:], os.Stdout)
	case "pause":
		err = runPause(os.Args[2:])
	case "component":
		err = runComponent(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q: want build, inspect, pause or component", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}
