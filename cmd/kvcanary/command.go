package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

// The pieces the commands share: a parent that only groups its subcommands,
// the RunE that hands the options to the test's runF or to the command's run
// function, and the endings of a report (--json or text, no data).

// groupHelp is the help text of a parent command.
type groupHelp struct {
	Use, Short, Long, Example string
}

// newGroupCmd builds a parent command from its help and subcommands. It takes
// no arguments; run bare it prints its help (groupsRejectArgs).
func newGroupCmd(h groupHelp, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: h.Use, Short: h.Short, Long: h.Long, Example: h.Example, Args: unknownSubcommand}
	cmd.AddCommand(subs...)
	return cmd
}

// runOr runs the command: runF when set (tests capture the options there),
// else run.
func runOr[O any](opts *O, runF, run func(*O) error) error {
	if runF != nil {
		return runF(opts)
	}
	return run(opts)
}

// runE is the RunE of a command whose arguments need no check beyond its
// Args: runOr.
func runE[O any](opts *O, runF, run func(*O) error) func(*cobra.Command, []string) error {
	return func(*cobra.Command, []string) error { return runOr(opts, runF, run) }
}

// runOnPath is the RunE of a command over one input (cobra.ExactArgs(1)):
// the argument goes to *path, then runOr.
func runOnPath[O any](opts *O, path *string, runF, run func(*O) error) func(*cobra.Command, []string) error {
	return func(_ *cobra.Command, args []string) error {
		*path = args[0]
		return runOr(opts, runF, run)
	}
}

// writeJSONOr writes v to w as --json asks, else prints the text report.
func writeJSONOr(w io.Writer, asJSON bool, v any, text func() error) error {
	if asJSON {
		return cmdutil.WriteJSON(w, v)
	}
	return text()
}

// writeNoData prints nd (text or --json) and returns its exit status (4).
func writeNoData(w io.Writer, asJSON bool, nd *cmdutil.NoData) error {
	if err := nd.Write(w, asJSON); err != nil {
		return err
	}
	return nd.Err()
}
