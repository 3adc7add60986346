// Package buildinfo holds the tool version stamped into bundles and run.start
// events. Version is set at link time (-ldflags "-X ...buildinfo.Version=v1.2.3");
// otherwise it comes from the module build info, falling back to "dev".
package buildinfo

import "runtime/debug"

// Version is overridden at link time by the Makefile.
var Version = ""

// String returns the tool version.
func String() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
