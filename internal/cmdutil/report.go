package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrorContext is what ReportError needs to know about the command that failed.
type ErrorContext struct {
	// JSON: the command was run with --json; the error goes to stdout as
	// one JSON object so a script reading stdout always gets JSON.
	JSON bool
	// HelpCommand is the command path a usage error points at
	// ("kvcanary sim run"); empty: no pointer.
	HelpCommand string
}

// ErrorJSON is the --json form of a failed command: the message and the
// process exit code (2 usage, 3 input, 4 no data, 130 interrupted).
type ErrorJSON struct {
	Error string `json:"error"`
	Code  int    `json:"code"`
}

// ReportError prints the error a command returned, as the one place every
// command's failure reaches the user:
//
//   - a silent exit (an ExitError without an error, after a printed report)
//     prints nothing;
//   - with --json, {"error": …, "code": …} on stdout;
//   - otherwise "kvcanary: <error>" on stderr, and for a usage error one
//     more line, "see 'kvcanary X --help'", as gh does; never the whole usage;
//   - an error the signal caused (exit 130 over a context.Canceled) says
//     "interrupted" where Go's chain would end in a bare "context canceled".
func ReportError(io *IOStreams, err error, code int, ec ErrorContext) {
	var ee *ExitError
	if err == nil || (errors.As(err, &ee) && ee.Err == nil) {
		return
	}
	msg := err.Error()
	if code == ExitInterrupted && errors.Is(err, context.Canceled) {
		msg = strings.TrimSuffix(strings.TrimSuffix(msg, context.Canceled.Error()), ": ") + ": interrupted"
		msg = strings.TrimPrefix(msg, ": ")
	}
	if ec.JSON {
		if WriteJSON(io.Out, ErrorJSON{Error: msg, Code: code}) == nil {
			return
		}
		// stdout is gone (a closed pipe): say it on stderr after all.
	}
	fmt.Fprintln(io.ErrOut, "kvcanary:", msg)
	if code == ExitUsage && ec.HelpCommand != "" {
		fmt.Fprintf(io.ErrOut, "see '%s --help'\n", ec.HelpCommand)
	}
}
