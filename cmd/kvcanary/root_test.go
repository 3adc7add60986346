package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

// TestRootUnknownCommand: an unknown command, subcommand or flag is a usage
// error (exit 2): one line naming it, the commands it may have meant, and
// one pointing at --help, never the whole usage; a bare group prints its
// help and exits 0.
func TestRootUnknownCommand(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string // the whole of stderr
		stdout string // substring of stdout
	}{
		{[]string{"nosuchcmd"}, cmdutil.ExitUsage,
			"kvcanary: unknown command \"nosuchcmd\" for \"kvcanary\"\nsee 'kvcanary --help'\n", ""},
		// A near miss names the commands it may have meant (issue 23:
		// "reprp" suggested nothing): within two edits, or a prefix.
		{[]string{"reprp"}, cmdutil.ExitUsage,
			"kvcanary: unknown command \"reprp\" for \"kvcanary\"\n\nDid you mean this?\n\treport\n\trepro\n\nsee 'kvcanary --help'\n", ""},
		{[]string{"trace", "exprt"}, cmdutil.ExitUsage,
			"kvcanary: unknown command \"exprt\" for \"kvcanary trace\"\n\nDid you mean this?\n\texport\n\nsee 'kvcanary trace --help'\n", ""},
		{[]string{"probe", "nosuch"}, cmdutil.ExitUsage,
			"kvcanary: unknown command \"nosuch\" for \"kvcanary probe\"\nsee 'kvcanary probe --help'\n", ""},
		{[]string{"trace", "nosuch"}, cmdutil.ExitUsage,
			"kvcanary: unknown command \"nosuch\" for \"kvcanary trace\"\nsee 'kvcanary trace --help'\n", ""},
		{[]string{"version", "--bogus"}, cmdutil.ExitUsage,
			"kvcanary: unknown flag: --bogus\nsee 'kvcanary version --help'\n", ""},
		{[]string{"sim", "run", "--rounds", "x"}, cmdutil.ExitUsage,
			"kvcanary: invalid argument \"x\" for \"--rounds\" flag: strconv.ParseInt: parsing \"x\": invalid syntax\nsee 'kvcanary sim run --help'\n", ""},
		{[]string{"probe"}, cmdutil.ExitOK, "", "Available Commands:"},
		{nil, cmdutil.ExitOK, "", "Available Commands:"},
	} {
		code, out, errOut := runTest(t, tc.args...)
		if code != tc.code {
			t.Errorf("%q: exit %d (stderr %q), want %d", tc.args, code, errOut, tc.code)
			continue
		}
		if errOut != tc.stderr {
			t.Errorf("%q: stderr\n%q\nwant\n%q", tc.args, errOut, tc.stderr)
		}
		if !strings.Contains(out, tc.stdout) {
			t.Errorf("%q: stdout %q, want %q", tc.args, out, tc.stdout)
		}
	}
}

// runTest runs the command line as main does, over fake streams, and
// returns the exit code, stdout and stderr.
func runTest(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	c := newTestCLI()
	code := run(c.F, args)
	return code, c.Out.String(), c.ErrOut.String()
}

// TestJSONErrors: under --json a failure is one JSON object on stdout with
// the exit code, whatever the kind of failure, and nothing on stderr.
func TestJSONErrors(t *testing.T) {
	missing := t.TempDir() + "/missing.kvtrace"
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"version", "--json", "--bogus"}, cmdutil.ExitUsage, "unknown flag: --bogus"},
		{[]string{"sim", "run", "--json", "--sessions", "0"}, cmdutil.ExitUsage, "--sessions"},
		{[]string{"canary", "report", "--json", missing}, cmdutil.ExitInput, "missing.kvtrace"},
		{[]string{"ab", missing, missing, "--json"}, cmdutil.ExitInput, "missing.kvtrace"},
	} {
		code, out, errOut := runTest(t, tc.args...)
		if code != tc.code {
			t.Errorf("%q: exit %d, want %d (stdout %q stderr %q)", tc.args, code, tc.code, out, errOut)
		}
		var got cmdutil.ErrorJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Errorf("%q: stdout is not one JSON object: %v\n%s", tc.args, err, out)
			continue
		}
		if got.Code != tc.code || !strings.Contains(got.Error, tc.msg) {
			t.Errorf("%q: %+v, want code %d and an error naming %q", tc.args, got, tc.code, tc.msg)
		}
		if errOut != "" {
			t.Errorf("%q: stderr %q, want nothing (the error is on stdout)", tc.args, errOut)
		}
	}
	// Without --json the same failure is text on stderr.
	code, out, errOut := runTest(t, "canary", "report", missing)
	if code != cmdutil.ExitInput || out != "" || !strings.HasPrefix(errOut, "kvcanary: ") {
		t.Errorf("text error: exit %d stdout %q stderr %q", code, out, errOut)
	}
}

// TestVersionFlag: --version prints the same line as `kvcanary version`,
// with a commit (or "commit unknown": never a made-up one).
func TestVersionFlag(t *testing.T) {
	c1, o1, _ := runTest(t, "--version")
	c2, o2, _ := runTest(t, "version")
	if c1 != 0 || c2 != 0 || o1 != o2 || !strings.HasPrefix(o1, "kvcanary ") || !strings.Contains(o1, "commit ") {
		t.Errorf("--version %d %q; version %d %q", c1, o1, c2, o2)
	}
	_, js, _ := runTest(t, "version", "--json")
	var v VersionInfo
	if err := json.Unmarshal([]byte(js), &v); err != nil || v.Version == "" || v.Go == "" {
		t.Errorf("version --json %q: %+v %v", js, v, err)
	}
}

// TestEveryCommandHasAnExample: `kvcanary X --help` always shows how to run X.
func TestEveryCommandHasAnExample(t *testing.T) {
	root := NewCmdRoot(newTestCLI().F)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" || c.Parent() != nil && c.Parent().Name() == "completion" {
			return
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s has no Example", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// valueName is what a flag's back-quoted value name may be: one upper-case
// word, or a few joined by : = - _ (HOST:PORT, KEY=VALUE, MIN-MAX).
var valueName = regexp.MustCompile(`^[A-Z][A-Z0-9]*([:=_-][A-Z][A-Z0-9]*)*$`)

// TestFlagValueNames: pflag takes the first back-quoted text of a flag's
// usage as its value name (--tls-cert FILE), so back quotes used for
// anything else become a broken name in help and docs/cli (issue 23:
// "--tls-cert kvcanary certs init"). Every flag of every command whose
// usage has back quotes must name one value with them, and only once.
func TestFlagValueNames(t *testing.T) {
	n := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if !strings.Contains(f.Usage, "`") {
				return
			}
			n++
			name, usage := pflag.UnquoteUsage(f)
			if !valueName.MatchString(name) {
				t.Errorf("%s --%s: value name %q, want one upper-case word like FILE or HOST:PORT (back quotes around anything else become the value name)", c.CommandPath(), f.Name, name)
			}
			if strings.Contains(usage, "`") {
				t.Errorf("%s --%s: a back quote is left in the usage after the value name: %q", c.CommandPath(), f.Name, usage)
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(NewCmdRoot(newTestCLI().F))
	if n < 20 {
		t.Fatalf("only %d flags with a value name: the walk missed commands", n)
	}
}
