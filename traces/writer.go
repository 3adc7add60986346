package traces

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvcanary/kvcanary/internal/buildinfo"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// FlushInterval is the longest a written event waits before its frame is
// ended and handed to the OS.
const FlushInterval = time.Second

// ErrClosed is returned by writes to a closed Writer.
var ErrClosed = errors.New("bundle writer closed")

// Writer writes one bundle. Its methods are safe for concurrent use (a mutex
// serializes them, because a timer ends frames in the background); the
// intended use is one goroutine calling Write, as Record does. Frames are
// compressed and written by a second goroutine, so encoding events and
// compressing the previous frame overlap; always Close a Writer.
type Writer struct {
	mu     sync.Mutex
	dst    io.Writer
	file   *os.File // set by Create; synced and closed by Close
	name   string
	buf    []byte // pending JSON lines, ending on '\n'
	queued uint64 // events in buf
	closed bool

	events  uint64
	counts  [256]uint64
	firstTS int64
	lastTS  int64
	dropped uint64
	// droppedUnknown and footerLabels: SetDroppedUnknown, SetFooterLabel.
	droppedUnknown bool
	footerLabels   map[string]string
	rejected       uint64 // refused by this writer
	upstream       uint64 // refused before reaching it (AddRejected)

	now      func() time.Time
	stop     chan struct{}
	stopOnce sync.Once
	stopped  chan struct{}
	interval time.Duration

	// The compressor goroutine owns out, frames and offset, and is the only
	// writer of dst after the manifest frame.
	jobs     chan frameJob
	free     chan []byte
	compDone chan struct{}
	out      []byte
	frames   uint64
	offset   int64
	work     int64 // what a reader's decompression budget counts so far (decoded bytes and lineWork per line)
	errMu    sync.Mutex
	ioErr    error       // first I/O error, sticky
	onError  func(error) // OnError's callback
	// lostQueued counts accounted events whose frame failed to write or was
	// skipped after the first I/O error; lostLate events refused after it.
	lostQueued atomic.Uint64
	lostLate   uint64 // under mu
}

// frameJob is one frame for the compressor: buf (may be empty) holding
// events events and, for a Flush, ack closed once everything before it is
// written.
type frameJob struct {
	buf    []byte
	events uint64
	ack    chan struct{}
}

// Create creates (or truncates) the bundle file at path and writes the
// manifest as its first frame. Close syncs and closes the file. A new file
// is readable by its owner only (0600), and an existing one loses group and
// other permissions: bundles may hold prompts.
func Create(path string, m Manifest) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	// An existing file keeps its mode through O_TRUNC: narrow a regular
	// one to 0600 too (never a device or FIFO given as the path).
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o077 != 0 {
		if err := f.Chmod(st.Mode().Perm() &^ 0o077); err != nil {
			f.Close()
			return nil, fmt.Errorf("create bundle: %w", err)
		}
	}
	w, err := newWriter(f, path, m, FlushInterval, time.Now)
	if err != nil {
		f.Close()
		return nil, err
	}
	w.file = f
	return w, nil
}

// NewWriter writes a bundle to dst, starting with the manifest frame. Close
// does not close dst. Each frame reaches dst in one Write call, made from
// the Writer's own goroutine.
func NewWriter(dst io.Writer, m Manifest) (*Writer, error) {
	return newWriter(dst, "bundle", m, FlushInterval, time.Now)
}

func newWriter(dst io.Writer, name string, m Manifest, interval time.Duration, now func() time.Time) (*Writer, error) {
	if _, err := encoder(); err != nil {
		return nil, fmt.Errorf("create bundle %s: zstd encoder: %w", name, err)
	}
	m.FormatVersion = FormatVersion // a writer writes the version it implements
	if m.Tool == "" {
		m.Tool = "kvcanary " + buildinfo.String()
	}
	if m.Created.IsZero() {
		m.Created = now()
	}
	w := &Writer{dst: dst, name: name, now: now, interval: interval}
	line, err := json.Marshal(manifestRecord{Manifest: &m})
	if err != nil {
		return nil, fmt.Errorf("create bundle %s: encode manifest: %w", name, err)
	}
	// The manifest frame is written before Create returns.
	if err := w.writeFrame(append(line, '\n')); err != nil {
		return nil, err
	}
	w.jobs = make(chan frameJob, 1)
	w.free = make(chan []byte, 3)
	w.compDone = make(chan struct{})
	go w.compressor()
	if interval > 0 {
		w.stop = make(chan struct{})
		w.stopped = make(chan struct{})
		go w.ticker()
	}
	return w, nil
}

// compressor compresses and writes frames in order.
func (w *Writer) compressor() {
	defer close(w.compDone)
	for job := range w.jobs {
		if len(job.buf) > 0 {
			written := w.frames
			if w.ioError() == nil {
				w.writeFrame(job.buf) // an error is kept and returned by the next call
			}
			if w.frames == written { // torn or skipped: a reader gets none of its events
				w.lostQueued.Add(job.events)
			}
		}
		if job.buf != nil && cap(job.buf) <= 4*frameBytes { // one huge event: do not keep its buffer
			select {
			case w.free <- job.buf[:0]:
			default:
			}
		}
		if job.ack != nil {
			close(job.ack)
		}
	}
}

// writeFrame compresses buf into one frame and writes it.
func (w *Writer) writeFrame(buf []byte) error {
	enc, _ := encoder() // checked in newWriter
	w.out = enc.EncodeAll(buf, w.out[:0])
	n, err := w.dst.Write(w.out)
	w.offset += int64(n)
	if err == nil && n < len(w.out) {
		err = io.ErrShortWrite
	}
	if err != nil {
		err = fmt.Errorf("write bundle %s frame %d at byte %d: %w", w.name, w.frames+1, w.offset-int64(n), err)
		w.fail(err)
		return err
	}
	w.frames++
	w.work += int64(len(buf)) + int64(bytes.Count(buf, []byte{'\n'}))*lineWork
	return w.padForBudget()
}

// padRatio is the decoded-to-file ratio a writer keeps its bundles under:
// three quarters of the 64:1 budget of readers before issue 27 (today's
// decodeRatio is 1024), so every bundle it writes reads back whole in
// older kvcanary versions too.
const padRatio = 48

// padForBudget keeps the bundle readable under the reader's decompression
// budget (decodeSlack + decodeRatio × file bytes read). Honest events can
// compress far better than that ratio (a stream of identical lines reaches
// 1,300:1, like a decompression bomb); the reader cannot tell them from a
// bomb, so the writer pads with a skippable frame of zeros whenever the work
// a reader will do outgrows half the slack plus padRatio × the bytes written.
// Realistic bundles (40:1 and less) never need it.
func (w *Writer) padForBudget() error {
	pad := (w.work-decodeSlack/2)/padRatio - w.offset
	if pad <= 0 {
		return nil
	}
	pad = max(pad, 64<<10) // pad in steps, not after every frame
	// A zstd skippable frame (RFC 8878 §3.1.2): readers (kvcanary's,
	// zstdcat) step over its bytes.
	w.out = binary.LittleEndian.AppendUint32(w.out[:0], skippableMagic)
	w.out = binary.LittleEndian.AppendUint32(w.out, uint32(pad))
	w.out = append(w.out, make([]byte, pad)...)
	n, err := w.dst.Write(w.out)
	w.offset += int64(n)
	if err == nil && n < len(w.out) {
		err = io.ErrShortWrite
	}
	if err != nil {
		err = fmt.Errorf("write bundle %s padding at byte %d: %w", w.name, w.offset-int64(n), err)
		w.fail(err)
	}
	return err
}

// fail keeps err as the writer's I/O error if it is the first, and then
// calls the OnError callback.
func (w *Writer) fail(err error) {
	w.errMu.Lock()
	first := w.ioErr == nil
	if first {
		w.ioErr = err
	}
	f := w.onError
	w.errMu.Unlock()
	if first && f != nil {
		f(err)
	}
}

func (w *Writer) ioError() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.ioErr
}

// Err returns the first I/O error writing the bundle, as soon as the
// writer meets it (nil before). After it no event reaches the bundle: the
// writer counts them lost (Lost).
func (w *Writer) Err() error { return w.ioError() }

// OnError sets f to be called once, with the first I/O error, when the
// writer meets it (from the writer's goroutine: f must not block long, nor
// call the Writer's methods other than Err); if that error already
// happened, f is called now.
func (w *Writer) OnError(f func(error)) {
	w.errMu.Lock()
	w.onError = f
	err := w.ioErr
	w.errMu.Unlock()
	if err != nil && f != nil {
		f(err)
	}
}

// ticker ends the pending frame every interval so a killed writer loses at
// most the last interval of events.
func (w *Writer) ticker() {
	defer close(w.stopped)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			w.mu.Lock()
			if !w.closed {
				w.submitLocked(false)
			}
			w.mu.Unlock()
		case <-w.stop:
			return
		}
	}
}

// submitLocked hands the pending lines to the compressor as one frame; with
// wait, it returns once they (and all earlier frames) are written.
func (w *Writer) submitLocked(wait bool) error {
	if len(w.buf) == 0 && !wait {
		return w.ioError()
	}
	job := frameJob{buf: w.buf, events: w.queued}
	w.queued = 0
	if wait {
		job.ack = make(chan struct{})
	}
	w.jobs <- job // blocks while the compressor is a frame behind: backpressure
	if len(w.buf) > 0 {
		select {
		case b := <-w.free:
			w.buf = b
		default:
			w.buf = make([]byte, 0, frameBytes+frameBytes/4)
		}
	}
	if wait {
		<-job.ack
	}
	return w.ioError()
}

// Write appends one event. An invalid event (no body, body of another kind,
// a value hook.Event.Validate refuses, a line over the size limit) is refused with an error, counted as rejected, and does not poison the
// writer; an I/O error does: it is returned by every later call.
func (w *Writer) Write(ev hook.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usableLocked(true); err != nil {
		return err
	}
	if err := ev.Validate(); err != nil {
		w.rejected++
		return fmt.Errorf("write event to %s: %w", w.name, err)
	}
	n := len(w.buf)
	buf, err := w.appendEvent(w.buf, ev)
	if err != nil {
		w.buf = w.buf[:n]
		w.rejected++
		return fmt.Errorf("write event to %s: %w", w.name, err)
	}
	if err := hook.CheckEventLine(ev.Kind, len(buf)-n); err != nil {
		// The collector applies the same rule at ingest (hook.AdmitEvent),
		// so a recorded collection never gets here.
		w.buf = w.buf[:n]
		w.rejected++
		return fmt.Errorf("write event to %s: %w", w.name, err)
	}
	w.buf = append(buf, '\n')
	w.account(ev.Kind, ev.TS)
	if len(w.buf) >= frameBytes {
		return w.submitLocked(false)
	}
	return nil
}

// WriteLine appends one event already in its JSON-lines form (without the
// trailing newline), as produced by hook.Event.MarshalJSON or received from a
// JSON-lines producer. The caller vouches that line is one valid JSON object
// of the given kind and timestamp; the writer only refuses a line containing a
// newline, which would break the framing of the file.
func (w *Writer) WriteLine(kind hook.Kind, ts int64, line []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usableLocked(true); err != nil {
		return err
	}
	if !kind.Valid() || len(line) == 0 || hook.CheckEventLine(kind, len(line)) != nil || bytes.IndexByte(line, '\n') >= 0 {
		w.rejected++
		return fmt.Errorf("write line to %s: want one non-empty line of at most %d bytes of a valid kind (kind %s, %d bytes)", w.name, hook.MaxEventLine, kind, len(line))
	}
	w.buf = append(append(w.buf, line...), '\n')
	w.account(kind, ts)
	if len(w.buf) >= frameBytes {
		return w.submitLocked(false)
	}
	return nil
}

// usableLocked refuses a call after an I/O error or Close; offer: the call
// offers an event, lost if the writer failed.
func (w *Writer) usableLocked(offer bool) error {
	if err := w.ioError(); err != nil {
		if offer && !w.closed {
			w.lostLate++
		}
		return err
	}
	if w.closed {
		return ErrClosed
	}
	return nil
}

func (w *Writer) account(k hook.Kind, ts int64) {
	if w.events == 0 || ts < w.firstTS {
		w.firstTS = ts
	}
	if w.events == 0 || ts > w.lastTS {
		w.lastTS = ts
	}
	w.events++
	w.queued++
	w.counts[k]++
}

// Flush ends the pending frame and returns once it is handed to the OS (no
// fsync).
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usableLocked(false); err != nil {
		return err
	}
	return w.submitLocked(true)
}

// SetDropped records how many events were lost before reaching the writer
// (for example by a producer's emitter); Close writes it into the footer.
func (w *Writer) SetDropped(n uint64) {
	w.mu.Lock()
	w.dropped = n
	w.mu.Unlock()
}

// SetDroppedUnknown marks the footer's dropped count as a lower bound: some
// events' fate was never recorded (Footer.DroppedUnknown).
func (w *Writer) SetDroppedUnknown() {
	w.mu.Lock()
	w.droppedUnknown = true
	w.mu.Unlock()
}

// SetFooterLabel records a label Close writes into the footer
// (Footer.Labels): what the writer learned only by the end.
func (w *Writer) SetFooterLabel(k, v string) {
	w.mu.Lock()
	if w.footerLabels == nil {
		w.footerLabels = map[string]string{}
	}
	w.footerLabels[k] = v
	w.mu.Unlock()
}

// AddRejected records n events refused before they reached the writer (a
// collector's ingest rejections); Close adds them to the footer's
// "rejected", so the bundle says what its recording refused.
func (w *Writer) AddRejected(n uint64) {
	w.mu.Lock()
	w.upstream += n
	w.mu.Unlock()
}

// Count returns the number of events written so far (some may still be on
// their way to the file), less those lost to an I/O error: once Close
// returns, the number a reader reads back.
func (w *Writer) Count() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.events - w.lostQueued.Load()
}

// Lost returns the number of events offered to the writer that an I/O
// error kept from the bundle: those in the frame whose write failed, in
// frames after it, and those offered afterwards (refused unchecked). Once Close returns, Count +
// Lost + Rejected is every event offered.
func (w *Writer) Lost() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lostQueued.Load() + w.lostLate
}

// Rejected returns the number of events this writer refused as invalid (not
// counting AddRejected).
func (w *Writer) Rejected() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rejected
}

// Footer returns the footer Close writes (or wrote), as of now.
func (w *Writer) Footer() Footer {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.footerLocked()
}

func (w *Writer) footerLocked() Footer {
	f := Footer{Events: w.events, Counts: map[string]uint64{}, Dropped: w.dropped, Rejected: w.rejected + w.upstream,
		DroppedUnknown: w.droppedUnknown}
	if len(w.footerLabels) > 0 {
		f.Labels = maps.Clone(w.footerLabels)
	}
	if w.events > 0 {
		f.FirstTS, f.LastTS = w.firstTS, w.lastTS
	}
	for k, n := range w.counts {
		if n > 0 {
			f.Counts[hook.Kind(k).String()] = n
		}
	}
	return f
}

// Close writes the pending events, then the footer as its own frame, and
// (for Create) syncs and closes the file. It returns the first error the
// writer met. Closing twice returns nil.
func (w *Writer) Close() error {
	if w.stop != nil { // set once in newWriter, never changed
		w.stopOnce.Do(func() { close(w.stop) })
		<-w.stopped
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	w.submitLocked(false)
	f := w.footerLocked()
	f.Closed = w.now().UTC()
	line, merr := json.Marshal(footerRecord{Footer: &f})
	if merr == nil {
		w.buf = append(append(w.buf[:0], line...), '\n')
		w.submitLocked(false)
	}
	close(w.jobs)
	<-w.compDone
	err := w.ioError()
	if err == nil && merr != nil {
		err = fmt.Errorf("close bundle %s: encode footer: %w", w.name, merr)
	}
	if w.file != nil {
		if err == nil {
			if serr := w.file.Sync(); serr != nil {
				err = fmt.Errorf("close bundle %s: sync: %w", w.name, serr)
			}
		}
		if cerr := w.file.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close bundle %s: %w", w.name, cerr)
		}
	}
	return err
}

// Record drains a lossless bus subscription into w until the bus closes, then
// closes w. After an I/O error it keeps draining (so the producer never
// blocks on a dead sink; the writer refuses the events at once and counts
// them lost, with those queued when the error struck) and returns the error.
// Invalid events are refused and counted in the footer's "rejected"; they do
// not stop recording.
func Record(sub *hook.Subscription, w *Writer) error {
	for {
		ev, ok := sub.Recv()
		if !ok {
			break
		}
		w.Write(ev) // an I/O error is kept by w; invalid events are counted
	}
	cerr := w.Close()
	if ioErr := w.Err(); ioErr != nil {
		return fmt.Errorf("record bundle %s: %d events lost: %w", w.name, w.Lost(), ioErr)
	}
	return cerr
}

// appendEvent appends ev in hook's JSON-lines form (hook.AppendJSON).
func (w *Writer) appendEvent(b []byte, ev hook.Event) ([]byte, error) {
	return hook.AppendJSON(b, ev)
}
