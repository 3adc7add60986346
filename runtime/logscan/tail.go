package logscan

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// TailOptions configure a Tail. The zero value follows from the current end
// of the file, polls every 100 ms, and stamps events with Src.Proc "logscan".
type TailOptions struct {
	Parse     Options
	FromStart bool          // read what the file already holds first
	Poll      time.Duration // how often to look for new data; 0 means 100 ms
	Src       hook.Source   // source stamped on events; zero means {Proc: "logscan"}
	Run       string        // run id stamped on events
	// Now timestamps lines that carry no timestamp of their own; nil means time.Now.
	Now func() time.Time
	// OnRecord, when set, sees every parsed record (canary and checksum lines
	// included) on the tail's goroutine. The record is reused afterwards.
	OnRecord func(*Record)
}

// TailStats counts what a Tail saw besides the summary.
type TailStats struct {
	Events      int64 // sched events published
	Rotations   int64 // the path was replaced by a new file
	Truncations int64 // the file shrank under the reader
	Reopens     int64 // failed attempts to open the path after it vanished
}

// Tail follows a growing log file and publishes a hook.Sched event for every
// batch, retraction and preemption line. It survives truncation (copytruncate
// rotation), replacement of the file (rename rotation), garbage bytes and
// over-long lines; unknown lines are counted in the summary.
type Tail struct {
	path string
	pub  hook.Publisher
	opts TailOptions

	ready     chan struct{}
	readyOnce sync.Once

	mu    sync.Mutex
	sum   *Summary
	stats TailStats
}

// NewTail prepares to follow path, publishing to pub.
func NewTail(path string, pub hook.Publisher, opts TailOptions) *Tail {
	if opts.Poll <= 0 {
		opts.Poll = 100 * time.Millisecond
	}
	if opts.Src == (hook.Source{}) {
		opts.Src = hook.Source{Proc: "logscan"}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Tail{path: path, pub: pub, opts: opts, sum: NewSummary(opts.Parse), ready: make(chan struct{})}
}

// Ready is closed once Run has opened the file and positioned itself (at the
// end, unless FromStart), or has failed to: lines written after it is closed
// are seen.
func (t *Tail) Ready() <-chan struct{} { return t.ready }

// Summary returns a snapshot of everything read so far.
func (t *Tail) Summary() *Summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sum.Clone()
}

// Stats returns the tail's counters.
func (t *Tail) Stats() TailStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

// Run follows the file until ctx is done, then reads what is left, flushes a
// partial last line and returns nil. It returns an error only when the file
// cannot be opened at the start or a read fails.
func (t *Tail) Run(ctx context.Context) error {
	defer t.readyOnce.Do(func() { close(t.ready) })
	f, err := os.Open(t.path)
	if err != nil {
		return fmt.Errorf("open server log: %w", err)
	}
	defer func() { f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat server log %s: %w", t.path, err)
	}
	var off int64
	if !t.opts.FromStart {
		if off, err = f.Seek(0, io.SeekEnd); err != nil {
			return fmt.Errorf("seek server log %s: %w", t.path, err)
		}
	}
	// The file offset the scanner has read up to is off plus what it read
	// since (sc.read); off is 0 once it starts a file again from the top.
	sc := NewScanner(f, t.path, t.opts.Parse)
	sc.SetFollow(true)
	t.readyOnce.Do(func() { close(t.ready) })

	ticker := time.NewTicker(t.opts.Poll)
	defer ticker.Stop()
	var scratch []*hook.Sched
	for {
		for sc.Scan() {
			scratch = t.handle(sc.Record(), scratch)
		}
		if err := sc.Err(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			t.drain(sc, scratch)
			return nil
		case <-ticker.C:
		}
		// At EOF: has the file been truncated or replaced?
		cur, err := os.Stat(t.path)
		if err != nil {
			// Mid-rotation: the old name is gone and the new file not yet
			// there. Keep reading the open file and look again later.
			t.count(&t.stats.Reopens)
			continue
		}
		if !os.SameFile(fi, cur) {
			// Replaced: finish the old file, then start the new one from its top.
			scratch = t.drain(sc, scratch)
			nf, err := os.Open(t.path)
			if err != nil {
				t.count(&t.stats.Reopens)
				continue
			}
			nfi, err := nf.Stat()
			if err != nil {
				nf.Close()
				continue
			}
			f.Close()
			f, fi, off = nf, nfi, 0
			sc.Reset(f)
			t.count(&t.stats.Rotations)
			continue
		}
		if cur.Size() < off+sc.read() {
			// Truncated in place: the bytes we were holding are gone too.
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return fmt.Errorf("seek server log %s: %w", t.path, err)
			}
			off = 0
			sc.Reset(f)
			t.count(&t.stats.Truncations)
		}
	}
}

// drain handles every line the scanner has left, then its partial last line.
func (t *Tail) drain(sc *Scanner, scratch []*hook.Sched) []*hook.Sched {
	for sc.Scan() {
		scratch = t.handle(sc.Record(), scratch)
	}
	if sc.Flush() {
		scratch = t.handle(sc.Record(), scratch)
	}
	return scratch
}

// count adds one to a counter of t.stats.
func (t *Tail) count(n *int64) {
	t.mu.Lock()
	*n++
	t.mu.Unlock()
}

func (t *Tail) handle(r *Record, scratch []*hook.Sched) []*hook.Sched {
	if t.opts.OnRecord != nil {
		t.opts.OnRecord(r)
	}
	scratch = r.AppendSched(scratch[:0])
	t.mu.Lock()
	t.sum.Add(r)
	t.stats.Events += int64(len(scratch))
	t.mu.Unlock()
	if len(scratch) == 0 {
		return scratch
	}
	ts := r.TS
	if ts == 0 {
		ts = t.opts.Now().UnixNano()
	}
	for _, body := range scratch {
		t.pub.Publish(hook.Event{Kind: hook.KindSched, TS: ts, Src: t.opts.Src, Run: t.opts.Run, Body: body})
	}
	return scratch
}
