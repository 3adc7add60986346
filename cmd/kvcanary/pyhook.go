package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/pyhook"
)

// NewCmdPyhook builds `kvcanary pyhook` and its subcommands.
func NewCmdPyhook(f *cmdutil.Factory) *cobra.Command {
	return newGroupCmd(groupHelp{
		Use:     "pyhook",
		Short:   "The in-engine Python package (import name kvcanary) this binary carries",
		Example: `  export PYTHONPATH="$(kvcanary pyhook path)${PYTHONPATH:+:$PYTHONPATH}"`,
		Long: `kvcanary carries its in-engine Python package (import name kvcanary: room
checksums, replay canaries and graph-vs-eager reruns inside SGLang) in the
binary. "kvcanary wrap" puts it on PYTHONPATH for you; "kvcanary pyhook path"
extracts it and prints where, for containers and manual set-ups.`,
	}, NewCmdPyhookPath(f, nil))
}

// PyhookPathOptions are the inputs of `kvcanary pyhook path`.
type PyhookPathOptions struct {
	IO       *cmdutil.IOStreams
	JSON     *cmdutil.JSONFlags
	CacheDir string // "" means the user cache directory
}

// PyhookPathJSON is the --json shape of `kvcanary pyhook path`.
type PyhookPathJSON struct {
	Path           string `json:"path"`            // the PYTHONPATH entry
	Version        string `json:"version"`         // content version (SHA-256 of the files)
	PackageVersion string `json:"package_version"` // kvcanary.__version__; "" when unstated
	Files          int    `json:"files"`
}

// NewCmdPyhookPath builds `kvcanary pyhook path`.
func NewCmdPyhookPath(f *cmdutil.Factory, runF func(*PyhookPathOptions) error) *cobra.Command {
	opts := &PyhookPathOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "path [--cache-dir DIR] [--json]",
		Short: "Extract the Python package (once per version) and print the PYTHONPATH entry",
		Long: `Extract the embedded Python package, once per content version, into the user
cache directory ($XDG_CACHE_HOME/kvcanary or ~/.cache/kvcanary on Linux; --cache-dir
names another) and print the directory to put first on PYTHONPATH. It holds the
kvcanary package and a sitecustomize.py that, in every interpreter started
with it on PYTHONPATH and KVCANARY_ADDR set, hooks SGLang as its modules load.
Its pyproject.toml declares the SGLang plugin entry point, for installing the
package into the engine's environment instead (SGLANG_PLUGINS=kvcanary).

An intact copy is reused; a damaged one (a file edited or missing) is
replaced. Exit status: 0, or 3 when the directory cannot be written.`,
		Example: `  export PYTHONPATH="$(kvcanary pyhook path)${PYTHONPATH:+:$PYTHONPATH}"
  KVCANARY_ADDR=unix:///run/kvcanary.sock python3 -m sglang.launch_server ...
  kvcanary pyhook path --cache-dir /opt/kvcanary   # bake it into an image`,
		Args: usageArgs(cobra.NoArgs),
		RunE: runE(opts, runF, pyhookPathRun),
	}
	cmd.Flags().StringVar(&opts.CacheDir, "cache-dir", "", "extract under `DIR` instead of the user cache directory")
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

func pyhookPathRun(opts *PyhookPathOptions) error {
	dir, err := pyhook.Extract(opts.CacheDir)
	if err != nil {
		return cmdutil.InputError(err)
	}
	if !opts.JSON.JSON {
		_, err := fmt.Fprintln(opts.IO.Out, dir)
		return err
	}
	v, err := pyhook.Version()
	if err != nil {
		return cmdutil.InputError(err)
	}
	pv, err := pyhook.PackageVersion()
	if err != nil {
		return cmdutil.InputError(err)
	}
	files, err := pyhook.Files()
	if err != nil {
		return cmdutil.InputError(err)
	}
	return cmdutil.WriteJSON(opts.IO.Out, PyhookPathJSON{Path: dir, Version: v, PackageVersion: pv, Files: len(files)})
}
