package input

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// ErrInterrupted is wrapped (with the context's cause) by every error Open
// and File.Read return because the context was done.
var ErrInterrupted = errors.New("interrupted")

// File is an opened input: its name, what its first bytes are, and a
// cancellable reader over all of its bytes (the sniffed ones included).
type File struct {
	Name string
	Kind Kind
	// ZstdAt is, for Binary, the offset of the first zstd frame magic in the
	// sniffed bytes (-1 when none): a bundle whose first bytes are damaged.
	ZstdAt int

	br   *bufio.Reader
	cr   *ctxReader
	f    *os.File // closed by Close; nil for NewFile over a caller's reader
	stop func() bool
}

// bufferBytes is the read buffer; readers asking for more bypass it.
const bufferBytes = 64 << 10

// Open opens the file at path for reading and sniffs its first bytes. It
// returns when ctx is done even if open(2) blocks (a FIFO with no writer);
// the error then wraps ErrInterrupted and ctx's cause.
func Open(ctx context.Context, path string) (*File, error) {
	if err := ctx.Err(); err != nil {
		return nil, interrupted(ctx, path)
	}
	type opened struct {
		f   *os.File
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		f, err := os.Open(path) // blocks on a FIFO until a writer opens it
		ch <- opened{f, err}
	}()
	var f *os.File
	select {
	case o := <-ch:
		if o.err != nil {
			return nil, fmt.Errorf("open input: %w", o.err)
		}
		f = o.f
	case <-ctx.Done():
		go func() { // the open may still succeed: do not leak the descriptor
			if o := <-ch; o.f != nil {
				o.f.Close()
			}
		}()
		return nil, interrupted(ctx, path)
	}
	in, err := newFile(ctx, f, path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return in, nil
}

// NewFile sniffs r (stdin, say) under the name used in messages. Close does
// not close r.
func NewFile(ctx context.Context, r io.Reader, name string) (*File, error) {
	return newFile(ctx, r, name, nil)
}

func newFile(ctx context.Context, r io.Reader, name string, owned *os.File) (*File, error) {
	cr := &ctxReader{ctx: ctx, r: r, name: name}
	in := &File{Name: name, cr: cr, f: owned, stop: func() bool { return false }}
	if d, ok := r.(interface{ SetReadDeadline(time.Time) error }); ok {
		// A read blocked on a pipe, FIFO or socket returns at once when the
		// deadline passes; regular files never block for long.
		in.stop = context.AfterFunc(ctx, func() { d.SetReadDeadline(time.Now()) })
	}
	in.br = bufio.NewReaderSize(cr, bufferBytes)
	head, err := in.br.Peek(SniffBytes)
	if err != nil && err != io.EOF && !errors.Is(err, bufio.ErrBufferFull) {
		in.stop()
		return nil, err // cr's error names the input
	}
	in.Kind = Sniff(head)
	in.ZstdAt = -1
	if in.Kind == Binary {
		in.ZstdAt = zstdAt(head)
	}
	return in, nil
}

// Read reads the input from its first byte; once ctx is done it returns an
// error wrapping ErrInterrupted.
func (f *File) Read(p []byte) (int, error) { return f.br.Read(p) }

// Offset is the number of bytes read from the underlying file so far
// (including buffered ones).
func (f *File) Offset() int64 { return f.cr.off }

// Close releases the file opened by Open.
func (f *File) Close() error {
	f.stop()
	if f.f == nil {
		return nil
	}
	err := f.f.Close()
	f.f = nil
	return err
}

// ctxReader checks the context before and after every read.
type ctxReader struct {
	ctx  context.Context
	r    io.Reader
	name string
	off  int64
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, interrupted(c.ctx, c.name)
	}
	n, err := c.r.Read(p)
	c.off += int64(n)
	if err != nil && err != io.EOF {
		if c.ctx.Err() != nil {
			return n, interrupted(c.ctx, c.name)
		}
		return n, fmt.Errorf("read %s at byte %d: %w", c.name, c.off, err)
	}
	return n, err
}

func interrupted(ctx context.Context, name string) error {
	return fmt.Errorf("read %s: %w (%w)", name, ErrInterrupted, context.Cause(ctx))
}

// FormatError says an input is not what a command reads.
type FormatError struct {
	Name   string
	Kind   Kind
	Want   string // what the command reads, e.g. "a trace bundle or an SGLang log"
	ZstdAt int    // for Binary: offset of a zstd frame magic, -1 when none
}

func (e *FormatError) Error() string {
	switch e.Kind {
	case Empty:
		return fmt.Sprintf("%s: empty file, nothing to read (want %s)", e.Name, e.Want)
	case Gzip, Bzip2, XZ, LZ4, Zip:
		return fmt.Sprintf("%s: %s; %s", e.Name, e.Kind, e.Kind.decompressHint())
	case Zstd:
		return fmt.Sprintf("%s: zstd-compressed (want %s); if it is a compressed log, run zstdcat first", e.Name, e.Want)
	case Text:
		return fmt.Sprintf("%s: text, not %s (bundles are zstd streams; \"kvcanary logs scan\" reads server logs)", e.Name, e.Want)
	case Binary:
		if e.ZstdAt > 0 {
			return fmt.Sprintf("%s: binary data, not %s; a zstd frame starts at byte %d: a bundle whose first %d bytes are damaged?",
				e.Name, e.Want, e.ZstdAt, e.ZstdAt)
		}
		return fmt.Sprintf("%s: binary data, not %s", e.Name, e.Want)
	}
	return fmt.Sprintf("%s: %s, not %s", e.Name, e.Kind, e.Want)
}

// BundleCandidate reports whether the input may be a trace bundle: a zstd
// stream, or binary data holding a zstd frame early on (a bundle whose first
// bytes are damaged; the bundle reader skips them and says so).
func (f *File) BundleCandidate() bool { return f.Kind == Zstd || f.Kind == Binary && f.ZstdAt > 0 }

// Expect returns nil when the input's kind is one of ok, else a *FormatError
// saying what the input is; want names what the command reads.
func (f *File) Expect(want string, ok ...Kind) error {
	for _, k := range ok {
		if f.Kind == k {
			return nil
		}
	}
	return &FormatError{Name: f.Name, Kind: f.Kind, Want: want, ZstdAt: f.ZstdAt}
}
