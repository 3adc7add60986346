package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

// rootLong is the long help of `kvcanary`.
const rootLong = `kvcanary hunts silent output corruption in LLM serving stacks (SGLang, vLLM):
the bug class where, under concurrency, CUDA graph replay, multiple streams and
prefill/decode disaggregation, a fraction of requests come out garbled.

Reproduce with a corruption rate, localize layer by layer with one decisive test
each (transfer checksums, replay canaries, graph-vs-eager diffs), compare runs
with A/B statistics and confounds. Every command runs on the embedded twin
("kvcanary sim") when no GPU is at hand.

Exit codes: 0 ok, 1 a check found corruption, 2 usage error, 3 input error
(unreadable, empty, compressed or binary input is an error, never a verdict;
so is a server repro could not measure: every session failed, or it went away),
4 no data or partial evidence (checksum compare, canary report, graphdiff
report, ab: the input reads fine but holds none of the observations needed,
or its producers said they lost some, or the bundle lost events — the report
names what records them or what was lost, never a clean verdict), 130
interrupted: the first Ctrl-C (SIGINT) or SIGTERM stops any
command within a second; a second one kills it at once. collect and sim serve
run until stopped, so Ctrl-C is their normal end: they exit 0 with the bundle
complete.`

// rootExample holds the examples of `kvcanary`.
const rootExample = `  # no GPU: the whole investigation on the twin, and its live dashboard
  kvcanary demo
  kvcanary watch --sim
  # your SGLang host (README: "First 10 minutes on your SGLang host")
  kvcanary doctor                    # what this host has: NVML, eBPF, libcuda, SGLang's hook targets
  kvcanary repro --url http://127.0.0.1:30000 --sessions 80 --rounds 4 --record base.kvtrace
  kvcanary wrap --record decode.kvtrace -- python3 -m sglang.launch_server ...
  kvcanary checksum compare prefill.kvtrace decode.kvtrace
  kvcanary <command> --help          # every command has examples`

// NewCmdRoot builds the kvcanary command tree.
func NewCmdRoot(f *cmdutil.Factory) *cobra.Command {
	root := &cobra.Command{
		Use:           "kvcanary",
		Short:         "Hunt silent output corruption in LLM serving stacks",
		Long:          rootLong,
		Example:       rootExample,
		Version:       "set below",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// --version prints the same line as `kvcanary version`.
	root.Version = versionLine()
	root.SetVersionTemplate("{{.Version}}\n")
	root.Flags().Bool("version", false, "print the version, commit and build date (the line of kvcanary version)")
	root.SetIn(f.IO.In)
	root.SetOut(f.IO.Out)
	root.SetErr(f.IO.ErrOut)
	// A flag error is one line plus a pointer to --help (main prints both,
	// as gh does), not thirty lines of usage burying the line that matters.
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return cmdutil.UsageError("%w", err)
	})

	root.AddCommand(
		NewCmdVersion(f, nil),
		NewCmdGPU(f, nil),
		NewCmdProbe(f, nil),
		NewCmdDoctor(f, nil),
		NewCmdCanary(f, nil),
		NewCmdGraphDiff(f, nil),
		withSubcommands(NewCmdSim(f), NewCmdSimServe(f, nil)),
		NewCmdTrace(f),
		NewCmdLogs(f),
		NewCmdAB(f, nil),
		NewCmdChecksum(f, nil),
		NewCmdCollect(f, nil),
		NewCmdCerts(f, nil),
		NewCmdRepro(f, nil),
		NewCmdDemo(f, nil),
		NewCmdWatch(f, nil),
		NewCmdPyhook(f), NewCmdWrap(f, nil),
		NewCmdBisect(f, nil),
		NewCmdReport(f, nil),
		NewCmdGenDocs(f),
		// Commands register here, one line each.
	)
	groupsRejectArgs(root)
	registerCompletions(root)
	return root
}

// groupsRejectArgs makes every command that only groups subcommands (root,
// probe, trace, …) runnable: with no arguments it prints its help, and an
// unknown subcommand is a usage error (exit 2, one line, the commands it may
// have meant, and a pointer to --help). Cobra on its own never validates a
// non-runnable command's arguments: it printed help and exited 0 for
// `kvcanary probe nosuch`, and exited 3 without usage for `kvcanary
// nosuchcmd`.
func groupsRejectArgs(c *cobra.Command) {
	for _, sub := range c.Commands() {
		groupsRejectArgs(sub)
	}
	if !c.HasSubCommands() || c.Runnable() {
		return
	}
	if c.Args == nil {
		c.Args = unknownSubcommand
	}
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's own default, which SuggestionsFor does not apply
	}
	c.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
}

// unknownSubcommand rejects any argument of a group as an unknown command,
// with cobra's suggestions (a name within two edits, or one it begins):
// cobra makes them only in its own argument check, which a command with
// Args set (as every group has, above) never reaches, so `kvcanary reprp`
// suggested nothing.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t") + "\n"
	}
	return cmdutil.UsageError("%s", msg)
}

// usageArgs wraps a cobra positional-args validator so a violation is a usage error.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			// Cobra's "accepts 2 arg(s), received 1" says what is wrong but
			// not what is wanted: the use line does.
			if cmd.HasAvailableSubCommands() {
				return cmdutil.UsageError("%w", err)
			}
			return cmdutil.UsageError("%w (usage: %s)", err, cmd.UseLine())
		}
		return nil
	}
}
