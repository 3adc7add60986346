//go:build unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/testenv"
	"github.com/kvcanary/kvcanary/traces"
)

// TestWatchUnderTmux runs the real binary in a real terminal: tmux at
// 120×40, watch --bundle on a twin recording, the headline panels must
// appear, tab moves focus, s shows the snapshot's path in full, q quits with
// exit 0 and the exit report; at 80×24, the advertised minimum, every
// panel's decisive number is on screen (the LIVE-PAGE-OVERWRITE row, the
// divergent count, the help key).
func TestWatchUnderTmux(t *testing.T) {
	t.Parallel()             // its own processes, ports and temp dirs: it mostly waits on them
	bin := kvcanaryBinary(t) // skips with -short
	tmux := testenv.LookTool(t, "tmux", "apt-get install -y tmux; .ci/run installs it")
	dir := t.TempDir()
	bundle := filepath.Join(dir, "run.kvtrace")
	if out, err := exec.Command(bin, "sim", "run", "--sessions", "3", "--rounds", "1", "--pool-tokens", "20000", "--record", bundle).CombinedOutput(); err != nil {
		t.Fatalf("sim run: %v\n%s", err, out)
	}
	sock := filepath.Join(dir, "tmux.sock")
	tm := func(args ...string) (string, error) {
		out, err := exec.Command(tmux, append([]string{"-S", sock}, args...)...).CombinedOutput()
		return string(out), err
	}
	script := fmt.Sprintf("%s watch --bundle %s --speed max --snapshot-dir %s 2>%s; echo watch-exit=$?; sleep 600",
		bin, bundle, dir, filepath.Join(dir, "stderr"))
	if out, err := tm("new-session", "-d", "-s", "kvc", "-x", "120", "-y", "40", script); err != nil {
		t.Fatalf("tmux new-session: %v %s", err, out)
	}
	defer tm("kill-server")
	waitPane := func(session string, what ...string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		var pane string
		for time.Now().Before(deadline) {
			pane, _ = tm("capture-pane", "-p", "-t", session)
			ok := true
			for _, w := range what {
				ok = ok && strings.Contains(pane, w)
			}
			if ok {
				return pane
			}
			<-tick.C
		}
		t.Fatalf("pane never showed %q; last:\n%s", what, pane)
		return ""
	}
	waitPane("kvc", "kvcanary watch", "sessions 3", "checksum (transfer)", "canary (buffer)", "graphdiff (compute)",
		"scheduler", "no GPU samples (kvcanary gpu --emit ADDR feeds this) · no CUDA calls", "findings", "focus: findings", "] done")
	tm("send-keys", "-t", "kvc", "Tab")
	waitPane("kvc", "focus: sessions")
	tm("send-keys", "-t", "kvc", "s")
	snapPane := waitPane("kvc", "snapshot: ", " events to ")
	tm("send-keys", "-t", "kvc", "q")
	pane := waitPane("kvc", "watch-exit=0")
	if strings.Contains(pane, "focus: sessions") {
		t.Fatalf("the dashboard is still on screen after q (alternate screen not restored):\n%s", pane)
	}
	stderr, _ := os.ReadFile(filepath.Join(dir, "stderr"))
	if !strings.Contains(string(stderr), "events shown, 0 dropped by the view") {
		t.Fatalf("exit report: %q", stderr)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "kvcanary-snapshot-*.kvtrace"))
	if len(snaps) != 1 {
		t.Fatalf("snapshots %v, want one", snaps)
	}
	snap, err := traces.Inspect(snaps[0])
	if err != nil || snap.Events == 0 || snap.Manifest.Labels["snapshot"] == "" || snap.Truncated {
		t.Fatalf("snapshot %s: %+v, %v", snaps[0], snap, err)
	}
	if !strings.Contains(snapPane, snaps[0]) {
		t.Fatalf("the pane does not show the snapshot's full path %s:\n%s", snaps[0], snapPane)
	}

	// 80×24: the decisive numbers, found on screen.
	script = fmt.Sprintf("%s watch --bundle %s --speed max 2>/dev/null; echo watch-exit=$?; sleep 600", bin, bundle)
	if out, err := tm("new-session", "-d", "-s", "kvc80", "-x", "80", "-y", "24", script); err != nil {
		t.Fatalf("tmux new-session: %v %s", err, out)
	}
	pane = waitPane("kvc80", "LIVE-PAGE-OVERWRITE ", "divergent ", "? help", "corrupt ", "mismatched ")
	if !regexp.MustCompile(`LIVE-PAGE-OVERWRITE \d+`).MatchString(pane) || !regexp.MustCompile(`divergent \d+`).MatchString(pane) {
		t.Fatalf("80×24: a decisive number is cut:\n%s", pane)
	}
	tm("send-keys", "-t", "kvc80", "q")
	waitPane("kvc80", "watch-exit=0")

	// SIGTERM (to the watch process, by pid) also restores the terminal.
	if _, err := exec.LookPath("pgrep"); err != nil {
		t.Log("pgrep is not installed: the SIGTERM check is skipped")
		return
	}
	script = fmt.Sprintf("%s watch --bundle %s --speed 0.01x 2>/dev/null; echo watch-exit=$?; sleep 600", bin, bundle)
	if out, err := tm("new-session", "-d", "-s", "kvc2", "-x", "100", "-y", "30", script); err != nil {
		t.Fatalf("tmux new-session: %v %s", err, out)
	}
	waitPane("kvc2", "kvcanary watch", "findings")
	shell, err := tm("display-message", "-p", "-t", "kvc2", "#{pane_pid}")
	if err != nil {
		t.Fatal(err)
	}
	child, err := exec.Command("pgrep", "-P", strings.TrimSpace(shell)).Output()
	if err != nil {
		t.Fatalf("find the watch process under shell %s: %v", shell, err)
	}
	pid, err := strconv.Atoi(strings.Fields(string(child))[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	pane = waitPane("kvc2", "watch-exit=")
	if strings.Contains(pane, "focus: findings") || !strings.Contains(pane, "watch-exit=0") {
		t.Fatalf("after SIGTERM:\n%s", pane)
	}
}
