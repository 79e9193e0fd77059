// Package version carries the build's version, stamped by the Makefile with -ldflags.
package version

import "runtime/debug"

// Version is set at link time; "dev" marks a build without the Makefile.
var Version = "dev"

// Get returns the stamped version or, for a binary built by `go install module@version`, which
// stamps nothing, the module version Go recorded in the binary.
func Get() string {
	if Version != "dev" {
		return Version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return Version
}
