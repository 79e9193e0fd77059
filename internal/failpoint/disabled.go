//go:build !failpoints

package failpoint

// Hit does nothing: without the failpoints tag no point can be armed. The compiler inlines it
// away at every call site.
func Hit(string) {}
