package traces

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/kvcanary/kvcanary/internal/testenv"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

func manyFrames(t *testing.T) *frameLog {
	var evs []hook.Event
	for i := 0; i < 200; i++ {
		ev := sampleEvents()[i%len(hook.Kinds())]
		ev.TS = int64(i)
		evs = append(evs, ev)
	}
	return smallBundle(t, evs, 5) // 40 event frames: decode-ahead blocks on a full queue
}

// waitGoroutines waits until the goroutine count drops to at most n.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	testenv.WaitForState(t, "the decode-ahead goroutine to end", func() bool {
		runtime.GC()
		return runtime.NumGoroutine() <= n
	}, func() any {
		return fmt.Sprintf("%d goroutines, want at most %d: the decode-ahead goroutine leaked", runtime.NumGoroutine(), n)
	})
}

func TestCloseStopsDecodeAhead(t *testing.T) {
	l := manyFrames(t)
	path := filepath.Join(t.TempDir(), "run.kvtrace")
	if err := os.WriteFile(path, l.buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if runtime.NumGoroutine() <= base {
		t.Fatal("no decode-ahead goroutine after reading past the manifest frame")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	waitGoroutines(t, base)
	// Reading on after Close ends with an error instead of hanging.
	for i := 0; ; i++ {
		_, err := r.Next()
		if err == io.EOF {
			t.Fatal("Next after Close reached EOF as if the bundle were complete")
		}
		if err != nil {
			break
		}
		if i > 100 {
			t.Fatal("Next after Close keeps returning events")
		}
	}
}

func TestAbandonedReaderStopsDecodeAhead(t *testing.T) {
	l := manyFrames(t)
	base := runtime.NumGoroutine()
	func() {
		r, err := NewReader(bytes.NewReader(l.buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}()
	waitGoroutines(t, base)
}
