package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

// wrap collects locally and would replace KVCANARY_ADDR with its own
// socket: a user following the remote-mTLS recipe (KVCANARY_ADDR=tcp://…
// and KVCANARY_TLS_*) would send nothing remote, silently. wrap refuses
// with a usage error that says what to do instead, before starting
// anything.
func TestWrapRefusesARemoteCollectorInItsEnvironment(t *testing.T) {
	for _, env := range [][]string{
		{"KVCANARY_ADDR=tcp://collector.internal:7070", "KVCANARY_TLS_CERT=pki/p.pem", "KVCANARY_TLS_KEY=pki/p-key.pem", "KVCANARY_TLS_CA=pki/ca.pem"},
		{"KVCANARY_ADDR=unix:///run/kvcanary.sock"},
		{"KVCANARY_TLS_CA=pki/ca.pem"},
	} {
		dir := t.TempDir()
		c := newTestCLI()
		extracted := false
		cmd := NewCmdWrap(c.F, func(o *WrapOptions) error {
			o.CacheDir = filepath.Join(dir, "cache")
			o.environ = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
			o.extract = func(string) (string, error) { extracted = true; return dir, nil }
			return wrapRun(o)
		})
		cmd.SilenceErrors = true
		err := c.exec(cmd, "--record", filepath.Join(dir, "r.kvtrace"), "--", "true")
		name, _, _ := strings.Cut(env[0], "=")
		if cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), name) ||
			!strings.Contains(err.Error(), "trace merge") || !strings.Contains(err.Error(), "pyhook path") {
			t.Errorf("env %v: %v (exit %d); want a usage error naming %s and the two ways out", env, err, cmdutil.ExitCode(err), name)
		}
		if extracted {
			t.Errorf("env %v: wrap went on to extract the package", env)
		}
		if _, err := os.Stat(filepath.Join(dir, "r.kvtrace")); err == nil {
			t.Errorf("env %v: wrap created the bundle", env)
		}
	}
}
