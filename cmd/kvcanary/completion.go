package main

import (
	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/cmd/kvcanary/internal/doctor"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
)

// Shell completion of flag values and file arguments, registered in one
// place by flag name and command path (so the command files stay about
// their commands). `kvcanary completion bash|zsh|fish` prints the script.

// enumFlagValues are the fixed values of enum flags, wherever the flag is
// defined. TestCompletionValuesValid checks the engine's against sim.Config.
var enumFlagValues = map[string][]string{
	"index-k-dtype":  {"bf16", "fp8"},
	"disaggregation": {"pd", "none"},
	"canary-policy":  {"live", "all", "sweep:"},
	"inject":         sim.Faults,
	"speed":          {"max", "1x", "2x", "10x", "0.5x"},
	"require":        doctor.Groups,
}

// commandFlagValues are the values of enum flags whose values depend on the
// command (--format of trace export is not report's).
var commandFlagValues = map[string]map[string][]string{
	"kvcanary trace export": {"format": traceExportFormats},
	"kvcanary report":       {"format": reportFormats},
}

// bundleFlags take a trace bundle file.
var bundleFlags = []string{"record", "bundle"}

// argFiles: the file kinds each command's positional arguments complete as.
var argFiles = map[string][]string{
	"kvcanary ab":               {cmdutil.BundleExt},
	"kvcanary canary report":    {cmdutil.BundleExt, "log"},
	"kvcanary checksum compare": {cmdutil.BundleExt, "log"},
	"kvcanary graphdiff report": {cmdutil.BundleExt},
	"kvcanary trace inspect":    {cmdutil.BundleExt},
	"kvcanary trace cat":        {cmdutil.BundleExt},
}

// registerCompletions walks the tree under c and registers every completion
// above that applies; a flag with a completion of its own is left alone.
func registerCompletions(c *cobra.Command) {
	for _, sub := range c.Commands() {
		registerCompletions(sub)
	}
	if exts, ok := argFiles[c.CommandPath()]; ok && c.ValidArgsFunction == nil {
		cmdutil.CompleteArgFiles(c, exts...)
	}
	registered := func(name string) bool {
		_, ok := c.GetFlagCompletionFunc(name)
		return ok
	}
	for name, vals := range enumFlagValues {
		if c.LocalFlags().Lookup(name) != nil && !registered(name) {
			cmdutil.CompleteFlagValues(c, name, vals...)
		}
	}
	for name, vals := range commandFlagValues[c.CommandPath()] {
		if c.LocalFlags().Lookup(name) != nil && !registered(name) {
			cmdutil.CompleteFlagValues(c, name, vals...)
		}
	}
	if c.LocalFlags().Lookup("kind") != nil && !registered("kind") {
		var kinds []string
		for _, k := range hook.Kinds() {
			kinds = append(kinds, k.String())
		}
		cmdutil.CompleteFlagValues(c, "kind", kinds...)
	}
	for _, name := range bundleFlags {
		if c.LocalFlags().Lookup(name) != nil && !registered(name) {
			cmdutil.CompleteFlagFiles(c, name, cmdutil.BundleExt)
		}
	}
}
