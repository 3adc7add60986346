// Command kvcanary hunts silent output corruption in LLM serving stacks.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first Ctrl-C asks the command to stop and report; restoring the
	// default handling then lets a second one kill a shutdown that hangs
	// (a stuck disk under a bundle writer, say).
	context.AfterFunc(ctx, stop)
	err := run(ctx, os.Args[1:])
	interrupted := ctx.Err() != nil
	stop()
	code := report(err)
	if interrupted && code == cmdutil.ExitInput {
		code = cmdutil.ExitInterrupted // a read cut by the signal, however it was worded
	}
	os.Exit(code)
}

// run builds the command tree and executes it with args.
func run(ctx context.Context, args []string) error {
	f := cmdutil.NewFactory(ctx)
	root := NewCmdRoot(f)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

// report prints err (unless it is a silent finding exit) and returns the exit code.
func report(err error) int {
	if err == nil {
		return cmdutil.ExitOK
	}
	var ee *cmdutil.ExitError
	if !(errors.As(err, &ee) && ee.Err == nil) {
		fmt.Fprintln(os.Stderr, "kvcanary:", err)
	}
	return cmdutil.ExitCode(err)
}
