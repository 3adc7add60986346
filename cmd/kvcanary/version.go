package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/buildinfo"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// VersionOptions are the inputs of `kvcanary version`.
type VersionOptions struct {
	IO   *cmdutil.IOStreams
	JSON *cmdutil.JSONFlags
}

// VersionInfo is the --json shape of `kvcanary version`.
type VersionInfo struct {
	Version string `json:"version"`
	// Commit, Date and Modified: see buildinfo.Info (empty when the build
	// recorded none, never a made-up value).
	Commit       string `json:"commit,omitempty"`
	Date         string `json:"date,omitempty"`
	Modified     bool   `json:"modified,omitempty"`
	Go           string `json:"go"`
	OS           string `json:"os"`
	Arch         string `json:"arch"`
	EventVersion int    `json:"event_version"`
}

// NewCmdVersion builds `kvcanary version`.
func NewCmdVersion(f *cmdutil.Factory, runF func(*VersionOptions) error) *cobra.Command {
	opts := &VersionOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the kvcanary version, commit and build date",
		Long: `Print the version, the commit the binary was built from and its date, the Go
toolchain, the platform and the event model version.

Release builds carry all of them from link flags; a plain "go build" or
"go install" inside a git work tree takes the commit and its time from what
the toolchain recorded (vcs.revision, vcs.time; "-dirty" when the tree had
uncommitted changes). "kvcanary --version" prints the same line.`,
		Example: `  kvcanary version
  kvcanary --version
  kvcanary version --json | jq -r .commit`,
		Args: usageArgs(cobra.NoArgs),
		RunE: runE(opts, runF, versionRun),
	}
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

func versionRun(opts *VersionOptions) error {
	bi := buildinfo.Read()
	info := VersionInfo{
		Version: bi.Version, Commit: bi.Commit, Date: bi.Date, Modified: bi.Modified,
		Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, EventVersion: hook.Version,
	}
	if opts.JSON.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, info)
	}
	_, err := fmt.Fprintln(opts.IO.Out, versionLine())
	return err
}

// versionLine is what `kvcanary version` and `kvcanary --version` print:
// "kvcanary v1.2.3 (commit 0123456789ab, 2026-12-01T12:00:00Z) go1.26.8 linux/amd64, event model v1".
func versionLine() string {
	return fmt.Sprintf("kvcanary %s %s %s/%s, event model v%d",
		buildinfo.Read().Line(), runtime.Version(), runtime.GOOS, runtime.GOARCH, hook.Version)
}
