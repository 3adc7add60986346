package traces

import (
	"bytes"
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// fullDisk takes left bytes, then writes what fits of the next Write and
// fails it, as a filling disk does.
type fullDisk struct {
	bytes.Buffer
	left int
}

func (d *fullDisk) Write(p []byte) (int, error) {
	if len(p) <= d.left {
		d.left -= len(p)
		return d.Buffer.Write(p)
	}
	n := d.left
	d.left = 0
	d.Buffer.Write(p[:n])
	return n, syscall.ENOSPC
}

// When the disk fills, the events of the torn frame, of the frames queued
// behind it and those offered later are lost, never counted as written: the
// count is what a reader reads back, and count + lost is every event
// offered. The error is known (Err, OnError) before Close.
func TestWriterDiskFullCountsWhatReadsBack(t *testing.T) {
	disk := &fullDisk{left: 3 * frameBytes / 2}
	w, err := newWriter(disk, "full", testManifest, 0, func() time.Time { return testManifest.Created })
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reported []error
	w.OnError(func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() })

	rng := rand.New(rand.NewChaCha8([32]byte{7}))
	offered := uint64(0)
	offer := func(n int) {
		for range n {
			raw := make([]byte, 9<<10) // incompressible enough to fill the disk
			for i := range raw {
				raw[i] = byte(rng.Uint32())
			}
			ev := hook.Event{Kind: hook.KindSession, TS: int64(offered + 1),
				Body: &hook.Session{ID: "s", Outcome: "error", Rounds: 1, Reason: base64.StdEncoding.EncodeToString(raw)}}
			offered++
			w.Write(ev) // fails once the writer has met the error
		}
	}
	offer(400) // over 4 frames: one written, one torn, some queued or pending
	if ferr := w.Flush(); ferr == nil {
		t.Fatal("Flush on a full disk: no error")
	}
	if !errors.Is(w.Err(), syscall.ENOSPC) {
		t.Fatalf("Err before Close = %v, want ENOSPC", w.Err())
	}
	mu.Lock()
	if len(reported) != 1 || reported[0] != w.Err() {
		t.Errorf("OnError got %v before Close, want once %v", reported, w.Err())
	}
	mu.Unlock()
	offer(10) // after the error
	if cerr := w.Close(); !errors.Is(cerr, syscall.ENOSPC) {
		t.Fatalf("Close = %v, want ENOSPC", cerr)
	}

	r, err := NewReader(bytes.NewReader(disk.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	read := uint64(0)
	for _, err := range r.All() {
		if err != nil {
			t.Fatal(err)
		}
		read++
	}
	t.Logf("offered %d: count %d, lost %d, read back %d", offered, w.Count(), w.Lost(), read)
	if !r.Truncated() {
		t.Error("the bundle is not truncated: the disk never filled")
	}
	if read == 0 || w.Lost() == 0 {
		t.Fatalf("read %d, lost %d: want some of each", read, w.Lost())
	}
	if w.Count() != read || w.Count()+w.Lost() != offered || w.Rejected() != 0 {
		t.Errorf("Count %d, Lost %d, Rejected %d of %d offered; %d read back", w.Count(), w.Lost(), w.Rejected(), offered, read)
	}
	mu.Lock()
	if len(reported) != 1 {
		t.Errorf("OnError called %d times, want once", len(reported))
	}
	mu.Unlock()
}
