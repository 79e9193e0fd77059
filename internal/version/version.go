// Package version carries the build's version, stamped by the Makefile with -ldflags.
package version

// Version is set at link time; "dev" marks a build without the Makefile.
var Version = "dev"
