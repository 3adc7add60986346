package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// testCLI is the outside world of one command under test: fake streams (no
// TTY unless IO.SetTTY says so), the wall clock and a background context.
type testCLI struct {
	IO              *cmdutil.IOStreams
	In, Out, ErrOut *bytes.Buffer
	F               *cmdutil.Factory
}

func newTestCLI() *testCLI {
	ios, in, out, errOut := cmdutil.Test()
	return &testCLI{IO: ios, In: in, Out: out, ErrOut: errOut,
		F: &cmdutil.Factory{IO: ios, Now: time.Now, Ctx: context.Background()}}
}

// exec runs cmd with args, cobra's own output (usage, help) going to the
// fake streams too.
func (c *testCLI) exec(cmd *cobra.Command, args ...string) error {
	cmd.SetArgs(args)
	cmd.SetOut(c.Out)
	cmd.SetErr(c.ErrOut)
	return cmd.Execute()
}

// runCmd builds a command with newCmd (its real run function) over fresh
// fake streams, runs it with args, and returns what it wrote.
func runCmd[O any](newCmd func(*cmdutil.Factory, func(*O) error) *cobra.Command, args ...string) (stdout, stderr string, err error) {
	c := newTestCLI()
	err = c.exec(newCmd(c.F, nil), args...)
	return c.Out.String(), c.ErrOut.String(), err
}

// parseCmd builds a command with newCmd, parses args and returns the
// options its run function would get: nil when parsing stopped it (err
// then says why).
func parseCmd[O any](newCmd func(*cmdutil.Factory, func(*O) error) *cobra.Command, args ...string) (*O, error) {
	c := newTestCLI()
	var got *O
	err := c.exec(newCmd(c.F, func(o *O) error { got = o; return nil }), args...)
	return got, err
}

// writeBundle writes a closed bundle under t.TempDir() holding evs, their
// timestamps 1, 2, 3… in order.
func writeBundle(t *testing.T, man traces.Manifest, evs ...hook.Event) string {
	t.Helper()
	return writeBundleAt(t, filepath.Join(t.TempDir(), "run.kvtrace"), man, evs...)
}

// writeBundleAt is writeBundle at path.
func writeBundleAt(t *testing.T, path string, man traces.Manifest, evs ...hook.Event) string {
	t.Helper()
	w, err := traces.Create(path, man)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		ev.TS = int64(i + 1)
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// readBundle is what a bundle holds, read through to its end: the manifest,
// the events in order and the footer (nil when the bundle has none). A read
// error fails t.
type bundleContents struct {
	Manifest traces.Manifest
	Events   []hook.Event
	Footer   *traces.Footer
}

func readBundle(t *testing.T, path string) bundleContents {
	t.Helper()
	r, err := traces.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var b bundleContents
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b.Events = append(b.Events, ev)
	}
	b.Manifest = r.Manifest()
	b.Footer, _ = r.Footer()
	return b
}

// mustParse is parseCmd for args that must parse: a parse error fails t.
func mustParse[O any](t *testing.T, newCmd func(*cmdutil.Factory, func(*O) error) *cobra.Command, args ...string) *O {
	t.Helper()
	got, err := parseCmd(newCmd, args...)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// wantUsage parses args with newCmd and fails t unless parsing stopped with
// a usage error (exit 2) before the run function ran. It returns the error,
// for the callers that check what it names.
func wantUsage[O any](t *testing.T, newCmd func(*cmdutil.Factory, func(*O) error) *cobra.Command, args ...string) error {
	t.Helper()
	got, err := parseCmd(newCmd, args...)
	if cmdutil.ExitCode(err) != cmdutil.ExitUsage || got != nil {
		t.Errorf("%q: %v (exit %d, ran: %v), want a usage error", args, err, cmdutil.ExitCode(err), got != nil)
	}
	return err
}

// wantContains fails t for each of wants that got lacks, naming got as what
// ("output", "stderr") and showing it whole.
func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, got)
		}
	}
}

// wantOptions parses args with newCmd and fails t unless they parse and ok
// holds for the options the run function would get, which it returns.
func wantOptions[O any](t *testing.T, newCmd func(*cmdutil.Factory, func(*O) error) *cobra.Command, args []string, ok func(*O) bool) *O {
	t.Helper()
	got := mustParse(t, newCmd, args...)
	if got == nil || !ok(got) {
		t.Fatalf("%q: options %+v", args, got)
	}
	return got
}
