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
	Version      string `json:"version"`
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
		Short: "Print the kvcanary version",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return versionRun(opts)
		},
	}
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

func versionRun(opts *VersionOptions) error {
	info := VersionInfo{
		Version: buildinfo.String(), Go: runtime.Version(),
		OS: runtime.GOOS, Arch: runtime.GOARCH, EventVersion: hook.Version,
	}
	if opts.JSON.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, info)
	}
	_, err := fmt.Fprintf(opts.IO.Out, "kvcanary %s (%s %s/%s, event model v%d)\n",
		info.Version, info.Go, info.OS, info.Arch, info.EventVersion)
	return err
}
