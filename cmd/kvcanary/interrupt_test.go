package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// The real binary, built once for the tests that send it signals.
var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

// Which tests run in parallel: those that mostly wait on processes and
// servers of their own (the bisects through processes, wrap's stand-in
// engine and lingering producer, Prometheus, tmux, SIGINT to the binary,
// the offline commands' refusals) call t.Parallel, and so does the seeds'
// bisect, the longest, to overlap them. The others do not: the
// in-process twin runs are CPU-bound (nothing to gain on two cores, where
// go test already runs two packages at once), and several set the
// environment (t.Setenv) or signal the test process itself, which a
// parallel test must not.
func TestMain(m *testing.M) {
	// Commands keep things in the user's state directory (the demo's
	// pictures, dashboard snapshots): the tests' go to a directory of
	// their own, never the user's.
	state, err := os.MkdirTemp("", "kvcanary-test-state-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_STATE_HOME", state)
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.RemoveAll(state)
	os.Exit(code)
}

func kvcanaryBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the kvcanary binary")
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "kvcanary-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "kvcanary")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			binErr = errors.New("go build: " + err.Error() + ": " + string(out))
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// exitCode runs the binary to its end and returns its exit code and stderr.
func exitCode(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stderr.String()
	}
	t.Fatalf("%v: %v", args, err)
	return -1, ""
}

// Every file-reading command refuses input it cannot read with exit 3 and
// a message naming the file and what it is: never a verdict (issue 19 item
// 1: a gzip-rotated log holding a violation was "0 violations", exit 0).
func TestOfflineCommandsRefuseUnreadableInput(t *testing.T) {
	t.Parallel() // its own processes, ports and temp dirs: it mostly waits on them
	bin := kvcanaryBinary(t)
	dir := t.TempDir()
	violation, err := os.ReadFile("../../canary/testdata/sglang-canary.log")
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(violation)
	zw.Close()
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(i*7919>>3) ^ byte(i>>5) | 0x80
	}
	inputs := []struct {
		name, want string
		data       []byte
	}{
		{"app.log.gz", "app.log.gz: gzip-compressed; run zcat first or pass the decompressed log", gz.Bytes()},
		{"empty.log", "empty.log: empty file", nil},
		{"random.bin", "random.bin: binary data", random},
	}
	if _, err := exec.LookPath("zstd"); err == nil {
		out, err := exec.Command("sh", "-c", "printf 'not a bundle\\n' | zstd -q -c").Output()
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, struct {
			name, want string
			data       []byte
		}{"log.zst", "log.zst", out})
	} else {
		t.Logf("zstd CLI not installed: the zstd-but-not-a-bundle case is not run")
	}
	commands := [][]string{
		{"canary", "report"}, {"graphdiff", "report"}, {"trace", "inspect"}, {"trace", "cat"},
		{"logs", "scan"}, {"checksum", "compare"},
	}
	for _, in := range inputs {
		p := filepath.Join(dir, in.name)
		if err := os.WriteFile(p, in.data, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, c := range commands {
			code, stderr := exitCode(t, bin, append(c, p)...)
			if code != 3 || !strings.Contains(stderr, in.want) {
				t.Errorf("%s %s: exit %d, stderr %q; want 3 and %q", strings.Join(c, " "), in.name, code, stderr, in.want)
			}
		}
	}
}

// bundleBytes is a small closed bundle.
func bundleBytes(t *testing.T) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "b.kvtrace")
	w, err := traces.Create(p, traces.Manifest{Run: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20000 {
		ev := hook.Event{Kind: hook.KindSched, TS: int64(i + 1), Body: &hook.Sched{Phase: "decode", RunningReq: i % 7, Tokens: i}}
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fifoBlockedInOpen waits until a thread of pid sleeps in openat(2) (the
// FIFO's open, which comes after the signal handling is set up).
func fifoBlockedInOpen(t *testing.T, pid int) {
	t.Helper()
	nr := map[string]string{"amd64": "257 ", "arm64": "56 "}[runtime.GOARCH]
	if nr == "" {
		t.Skipf("openat number on %s not known to this test", runtime.GOARCH)
	}
	for range 1000 {
		tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "syscall"))
		for _, p := range tasks {
			if b, _ := os.ReadFile(p); strings.HasPrefix(string(b), nr) {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Skip("cannot see the process block in open(2) (no /proc/PID/task/TID/syscall?)")
}

// The first SIGINT stops every long offline command: exit 130, promptly
// (issue 19 item 4: `timeout 15 kvcanary canary report /dev/zero` ran 29
// minutes; a FIFO with no writer needed SIGKILL).
func TestFirstSIGINTStopsOfflineCommands(t *testing.T) {
	t.Parallel() // its own processes, ports and temp dirs: it mostly waits on them
	if runtime.GOOS != "linux" {
		t.Skip("FIFO and /proc based test; Linux only")
	}
	bin := kvcanaryBinary(t)
	bundle := bundleBytes(t)
	abA := filepath.Join(t.TempDir(), "a.kvtrace")
	if err := os.WriteFile(abA, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	logText := bytes.Repeat([]byte("[2026-11-29 08:00:05 TP0] Decode batch. #running-req: 12, #token: 40960, token usage: 0.31, cuda graph: True, gen throughput (token/s): 812.44, #queue-req: 0\n"), 2000)
	cases := []struct {
		name   string
		args   []string
		feed   []byte // written to the FIFO forever; nil: no writer at all
		nofifo bool
	}{
		{name: "canary report, FIFO without writer", args: []string{"canary", "report"}},
		{name: "trace inspect, FIFO without writer", args: []string{"trace", "inspect"}},
		{name: "canary report, endless log", args: []string{"canary", "report"}, feed: logText},
		{name: "logs scan, endless log", args: []string{"logs", "scan"}, feed: logText},
		{name: "checksum compare, endless log", args: []string{"checksum", "compare"}, feed: logText},
		{name: "canary report, endless bundle", args: []string{"canary", "report"}, feed: bundle},
		{name: "graphdiff report, endless bundle", args: []string{"graphdiff", "report"}, feed: bundle},
		{name: "trace inspect, endless bundle", args: []string{"trace", "inspect"}, feed: bundle},
		{name: "trace cat, endless bundle", args: []string{"trace", "cat"}, feed: bundle},
		// Issue 27 D10: ab opens its inputs like the other readers.
		{name: "ab, FIFO without writer", args: []string{"ab", abA}},
		{name: "ab, endless bundle", args: []string{"ab", abA}, feed: bundle},
	}
	var worst time.Duration
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fifo := filepath.Join(t.TempDir(), "in")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			cmd := exec.Command(bin, append(tc.args, fifo)...)
			stderr, done := startProc(t, cmd)
			stopFeed := make(chan struct{})
			if tc.feed == nil {
				fifoBlockedInOpen(t, cmd.Process.Pid)
			} else {
				w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				fed := make(chan struct{})
				go func(fed chan struct{}) {
					defer w.Close()
					total := 0
					for {
						select {
						case <-stopFeed:
							return
						default:
						}
						n, err := w.Write(tc.feed)
						total += n
						if total >= 4<<20 && fed != nil {
							close(fed) // the reader is well into the input
							fed = nil
						}
						if err != nil {
							return
						}
					}
				}(fed)
				select {
				case <-fed:
				case err := <-done:
					t.Fatalf("exited before the signal: %v, stderr %q", err, stderr.String())
				}
			}
			t0 := time.Now()
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("still running 5 s after SIGINT; stderr %q", stderr.String())
			}
			elapsed := time.Since(t0)
			close(stopFeed)
			if elapsed > worst {
				worst = elapsed
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 130 {
				t.Fatalf("exit %v after SIGINT, want 130; stderr %q", err, stderr.String())
			}
			if !strings.Contains(stderr.String(), "interrupted") {
				t.Errorf("stderr %q does not say it was interrupted", stderr.String())
			}
			t.Logf("exited 130 %v after SIGINT", elapsed.Round(time.Millisecond))
		})
	}
	t.Logf("slowest exit after SIGINT: %v", worst.Round(time.Millisecond))
}

// /dev/zero is binary data, refused at once; a decompression bomb is cut by
// the reader's budget and reported as damage (issue 19 items 4 and 5).
func TestDevZeroAndBomb(t *testing.T) {
	bin := kvcanaryBinary(t)
	if _, err := os.Stat("/dev/zero"); err == nil {
		code, stderr := exitCode(t, bin, "canary", "report", "/dev/zero")
		if code != 3 || !strings.Contains(stderr, "/dev/zero: binary data") {
			t.Errorf("canary report /dev/zero: exit %d, %q", code, stderr)
		}
	}
	// The bomb: a good bundle's manifest frame, then the same few hundred
	// bytes that decode to 32 MiB of junk lines, repeated to about 100 KB.
	bombPath := filepath.Join("..", "..", "traces", "testdata", "bomb.kvtrace")
	if _, err := os.Stat(bombPath); err != nil {
		t.Skipf("no bomb fixture: %v", err)
	}
	t0 := time.Now()
	code, stderr := exitCode(t, bin, "trace", "inspect", bombPath)
	if code != 0 || !strings.Contains(stderr, "decompression budget") {
		t.Fatalf("trace inspect bomb: exit %d, stderr %q; want 0 and the budget damage", code, stderr)
	}
	t.Logf("trace inspect of the %s bomb: %v", bombPath, time.Since(t0).Round(time.Millisecond))
}

// sim run: --sessions is bounded, and Ctrl-C exits 130, not 3 (issue 19
// item 13).
func TestSimRunSessionsBoundAndSIGINT(t *testing.T) {
	if err := wantUsage(t, NewCmdSimRun, "--sessions", strconv.Itoa(maxSimSessions+1)); !strings.Contains(fmt.Sprint(err), "at most "+strconv.Itoa(maxSimSessions)) {
		t.Errorf("--sessions %d: exit %d, %v", maxSimSessions+1, cmdutil.ExitCode(err), err)
	}

	bin := kvcanaryBinary(t)
	bundle := filepath.Join(t.TempDir(), "run.kvtrace")
	run := exec.Command(bin, "sim", "run", "--sessions", "2000", "--rounds", "8", "--record", bundle)
	stderr, done := startProc(t, run)
	for started := false; !started; { // the manifest is written as the run starts
		select {
		case err := <-done:
			t.Fatalf("sim run ended before the signal: %v %s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
			st, err := os.Stat(bundle)
			started = err == nil && st.Size() > 0
		}
	}
	t0 := time.Now()
	run.Process.Signal(os.Interrupt)
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Fatalf("sim run after SIGINT: %v, want exit 130; stderr %q", err, stderr.String())
		}
		t.Logf("sim run exited 130 %v after SIGINT", time.Since(t0).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		run.Process.Kill()
		t.Fatalf("sim run still running 10 s after SIGINT")
	}
}

// startProc starts cmd with its stderr captured; done yields what its Wait
// returns.
func startProc(t *testing.T, cmd *exec.Cmd) (stderr *bytes.Buffer, done <-chan error) {
	t.Helper()
	stderr = &bytes.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	go func() { ch <- cmd.Wait() }()
	return stderr, ch
}
