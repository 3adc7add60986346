package logscan

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/testenv"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

type collector struct {
	mu  sync.Mutex
	evs []hook.Event
}

func (c *collector) Publish(ev hook.Event) {
	c.mu.Lock()
	c.evs = append(c.evs, ev)
	c.mu.Unlock()
}

func (c *collector) snapshot() []hook.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]hook.Event(nil), c.evs...)
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func decodeLine(sec, running int) string {
	return fmt.Sprintf("[2025-06-01 12:00:%02d TP0] Decode batch, #running-req: %d, #token: 10, token usage: 0.50, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0, \n", sec, running)
}

func TestTailFollowsTruncationRotationGarbage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "server.log")
	// Content present before the tail starts is skipped (FromStart false).
	appendFile(t, path, decodeLine(0, 99))

	col := &collector{}
	tl := NewTail(path, col, TailOptions{Parse: Options{Year: 2025}, Poll: 2 * time.Millisecond, Run: "r1"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tl.Run(ctx) }()
	<-tl.Ready()

	appendFile(t, path, decodeLine(1, 10))
	appendFile(t, path, "\x00\xff garbage \x1b[31m\n")
	// A line written in two pieces.
	appendFile(t, path, "[2025-06-01 12:00:02 TP0] KV cache pool is full. Retract requests. #retr")
	time.Sleep(10 * time.Millisecond)
	appendFile(t, path, "acted_reqs: 3, #new_token_ratio: 0.4100 -> 0.7000\n")
	testenv.WaitFor(t, "retraction", func() bool { return tl.Summary().RetractionEvents == 1 })

	// copytruncate-style rotation: the file shrinks in place.
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "truncation seen", func() bool { return tl.Stats().Truncations == 1 })
	appendFile(t, path, decodeLine(3, 20))
	testenv.WaitFor(t, "line after truncation", func() bool { return tl.Summary().DecodeBatches == 2 })

	// rename rotation: a new file takes the name.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, decodeLine(5, 40))
	testenv.WaitFor(t, "rotation", func() bool { return tl.Stats().Rotations == 1 && tl.Summary().DecodeBatches == 3 })

	// A final line without newline is flushed at shutdown.
	appendFile(t, path, "INFO 06-01 12:00:06 [loggers.py:1] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 50 reqs, Waiting: 0 reqs, Preemptions: 2, GPU KV cache usage: 90.0%, Prefix cache hit rate: 0.0%")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	s := tl.Summary()
	if s.DecodeBatches != 4 || s.PeakRunningReq != 50 || s.Unrecognized != 1 || s.RetractedReqs != 3 || s.Preemptions != 2 {
		t.Errorf("summary = %+v", s)
	}
	var running []int
	retracted := 0
	for _, ev := range col.snapshot() {
		if ev.Kind != hook.KindSched || ev.Run != "r1" || ev.Src.Proc != "logscan" {
			t.Fatalf("bad event %+v", ev)
		}
		sc := ev.Body.(*hook.Sched)
		switch sc.Phase {
		case "decode":
			running = append(running, sc.RunningReq)
		case "retract":
			retracted += sc.Retracted
		}
		if ev.TS == 0 {
			t.Errorf("event without timestamp: %+v", ev)
		}
	}
	if fmt.Sprint(running) != "[10 20 40 50]" || retracted != 5 {
		t.Errorf("running = %v retracted = %d", running, retracted)
	}
	if st := tl.Stats(); st.Events != 6 {
		t.Errorf("stats = %+v", st)
	}
}

func TestTailMissingFile(t *testing.T) {
	tl := NewTail(filepath.Join(t.TempDir(), "nope.log"), &collector{}, TailOptions{})
	err := tl.Run(context.Background())
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want a not-exist error", err)
	}
}

func TestTailFromStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.log")
	appendFile(t, path, decodeLine(0, 7)+decodeLine(1, 8))
	col := &collector{}
	tl := NewTail(path, col, TailOptions{FromStart: true, Poll: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tl.Run(ctx) }()
	testenv.WaitFor(t, "existing lines", func() bool { return len(col.snapshot()) == 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
