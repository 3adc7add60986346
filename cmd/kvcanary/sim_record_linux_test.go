//go:build linux

package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/internal/testenv"
)

// Issue 27 D13: sim run --record on a full disk prints the run's summary,
// then the recording's error (exit 3); before, it printed only the error.
func TestSimRunRecordOnFullDiskPrintsTheSummary(t *testing.T) {
	dir := t.TempDir()
	// 40 sessions took 168 s under -race; 8 of 2 rounds still fill 64k
	// (the test fails when the disk does not fill: no error).
	size, sessions := "size=256k", []string{"--sessions", "40"}
	if raceEnabled {
		size, sessions = "size=64k", []string{"--sessions", "8", "--rounds", "2"}
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, size); err != nil {
		testenv.SkipOrFail(t, "cannot mount a small tmpfs (needs root): "+err.Error())
	}
	t.Cleanup(func() { syscall.Unmount(dir, 0) })
	out, _, err := runCmd(NewCmdSimRun, append(sessions, "--record", filepath.Join(dir, "full.kvtrace"))...)
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("sim run --record on a full disk: %v (exit %d), want exit 3 naming the disk", err, cmdutil.ExitCode(err))
	}
	if !strings.Contains(out, "outcomes: done=") {
		t.Fatalf("no summary before the error:\n%s", out)
	}
}
