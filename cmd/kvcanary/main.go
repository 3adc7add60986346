// Command kvcanary hunts silent output corruption in LLM serving stacks.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first Ctrl-C asks the command to stop and report; restoring the
	// default handling then lets a second one kill a shutdown that hangs
	// (a stuck disk under a bundle writer, say).
	context.AfterFunc(ctx, stop)
	f := cmdutil.NewFactory(ctx)
	code := run(f, os.Args[1:])
	stop()
	os.Exit(code)
}

// run builds the command tree, executes it with args and reports its error
// on f's streams; it returns the exit code.
func run(f *cmdutil.Factory, args []string) int {
	root := NewCmdRoot(f)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(f.Ctx)
	interrupted := f.Ctx.Err() != nil
	code := cmdutil.ExitCodeAfter(err, interrupted)
	if err != nil {
		cmdutil.ReportError(f.IO, err, code, cmdutil.ErrorContext{
			JSON:        jsonRequested(cmd, args),
			HelpCommand: helpCommand(cmd, root),
		})
	}
	return code
}

// helpCommand is the command whose --help a usage error points at: the one
// that failed, or the root when cobra could not tell.
func helpCommand(cmd, root *cobra.Command) string {
	if cmd == nil {
		cmd = root
	}
	return cmd.CommandPath()
}

// jsonRequested reports whether the failed command was asked for --json:
// the parsed flag, or (when parsing stopped before reaching it, a flag
// error) the word on the command line before any "--".
func jsonRequested(cmd *cobra.Command, args []string) bool {
	if cmd == nil {
		return false
	}
	fl := cmd.Flags().Lookup("json")
	if fl == nil {
		return false
	}
	if fl.Changed {
		return fl.Value.String() == "true"
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--json" || a == "--json=true" {
			return true
		}
	}
	return false
}
