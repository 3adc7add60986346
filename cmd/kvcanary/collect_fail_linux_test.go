//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/internal/testenv"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// lockedBuffer is a bytes.Buffer safe to write from the command and read
// from the test at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Issue 27 D14: collect whose recording failed (a full disk) exits 3 after the
// Ctrl-C that ends it, not 130 as if all went well; the summary still prints.
func TestCollectExitsThreeWhenRecordingFailed(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		testenv.SkipOrFail(t, "cannot mount a small tmpfs (needs root): "+err.Error())
	}
	t.Cleanup(func() { syscall.Unmount(dir, 0) })
	sock := filepath.Join(t.TempDir(), "c.sock")
	var out, errOut lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &cmdutil.Factory{IO: &cmdutil.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, Now: time.Now, Ctx: ctx}
	code := make(chan int, 1)
	go func() {
		code <- run(f, []string{"collect", "--listen", "unix://" + sock, "--record", filepath.Join(dir, "full.kvtrace")})
	}()
	testenv.WaitForState(t, "collect listening", func() bool { _, err := os.Stat(sock); return err == nil }, func() any { return errOut.String() })
	em, err := hook.Dial("unix://"+sock, hook.DialOptions{FlushTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewChaCha8([32]byte{7}))
	raw := make([]byte, 9<<10)
	for i := 0; i < 400 && !strings.Contains(errOut.String(), "not recorded"); i++ { // 400 × 12 KB: past the 1 MB disk
		for j := range raw {
			raw[j] = byte(rng.Uint32())
		}
		em.Emit(hook.Event{Kind: hook.KindSession, TS: int64(i + 1), Body: &hook.Session{ID: "s", Outcome: "error", Reason: base64.StdEncoding.EncodeToString(raw)}})
	}
	em.Close()
	testenv.WaitForState(t, "the recording failure reported", func() bool { return strings.Contains(errOut.String(), "not recorded") }, func() any { return errOut.String() })
	cancel() // the Ctrl-C that ends every collect
	if c := <-code; c != cmdutil.ExitInput {
		t.Fatalf("collect whose recording failed: exit %d, want 3\n%s", c, errOut.String())
	}
	if s := errOut.String(); !strings.Contains(s, "no space left on device") || !strings.Contains(s, "events") {
		t.Fatalf("stderr lacks the summary and the cause:\n%s", s)
	}
}
