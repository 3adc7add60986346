//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procRuns reports whether pid exists and is not a zombie (a container's
// init may never reap the orphan).
func procRuns(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// TestWrapSIGKILLedTakesItsCommandAlong (issue 27 D11): a SIGKILLed wrap
// left the engine running under init and its socket directory behind. The
// command now gets SIGTERM when wrap dies, and the next wrap removes the
// directory of a wrap that is gone.
func TestWrapSIGKILLedTakesItsCommandAlong(t *testing.T) {
	t.Parallel()
	bin := kvcanaryBinary(t)
	// A short TMPDIR: wrap moves to /tmp past 80 bytes (a socket path's limit).
	tmp, err := os.MkdirTemp("", "kw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	pidFile := filepath.Join(tmp, "child.pid")
	w := exec.Command(bin, "wrap", "--", "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 60")
	w.Env = append(os.Environ(), "TMPDIR="+tmp)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	var child int
	for deadline := time.Now().Add(30 * time.Second); child == 0; {
		if b, err := os.ReadFile(pidFile); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			w.Process.Kill()
			t.Fatal("the wrapped command never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	dirs, _ := filepath.Glob(filepath.Join(tmp, "kvcanary-wrap-*"))
	if len(dirs) != 1 {
		t.Fatalf("wrap's socket directories in TMPDIR: %v, want 1", dirs)
	}
	if err := w.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	w.Wait()
	for deadline := time.Now().Add(10 * time.Second); procRuns(child); {
		if time.Now().After(deadline) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("the command (pid %d) still runs 10s after wrap was SIGKILLed", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(dirs[0]); err != nil {
		t.Fatalf("the killed wrap's directory is already gone (%v): the test proves nothing", err)
	}

	// The next wrap removes the dead one's directory, and its own at exit.
	next := exec.Command(bin, "wrap", "--", "true")
	next.Env = append(os.Environ(), "TMPDIR="+tmp)
	if out, err := next.CombinedOutput(); err != nil {
		t.Fatalf("second wrap: %v\n%s", err, out)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "kvcanary-wrap-*")); len(left) != 0 {
		t.Fatalf("socket directories left after the next wrap: %v", left)
	}
}

// TestCleanStaleWrapDirsSparesLiveOnes: only a directory whose owner is
// gone goes; one in use, or one without an owner file, stays.
func TestCleanStaleWrapDirsSparesLiveOnes(t *testing.T) {
	parent := t.TempDir()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(name, owner string) string {
		d := filepath.Join(parent, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			os.WriteFile(filepath.Join(d, wrapDirOwner), []byte(owner+"\n"), 0o600)
		}
		return d
	}
	dead := mk("kvcanary-wrap-1", strconv.Itoa(gone.Process.Pid))
	live := mk("kvcanary-wrap-2", strconv.Itoa(os.Getpid()))
	unowned := mk("kvcanary-wrap-3", "")
	other := mk("other-dir", strconv.Itoa(gone.Process.Pid))
	if n := cleanStaleWrapDirs(parent); n != 1 {
		t.Errorf("removed %d directories, want 1", n)
	}
	if _, err := os.Stat(dead); err == nil {
		t.Error("the directory of a wrap that is gone stayed")
	}
	for _, d := range []string{live, unowned, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s removed: %v", filepath.Base(d), err)
		}
	}
}
