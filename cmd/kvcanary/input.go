package main

import (
	"context"

	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/internal/input"
	"github.com/kvcanary/kvcanary/traces"
)

// What the offline commands read, as their format errors name it.
const (
	wantBundle       = "a trace bundle (.kvtrace)"
	wantLog          = "a text server log"
	wantBundleOrLog  = "a trace bundle or a text server log"
	wantChecksumFile = "a trace bundle or a text log of room checksums"
)

// orBackground is ctx, or context.Background for options built without one
// (tests).
func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// openInput opens path, sniffs it and checks it is one of ok kinds. Every
// error is an input error (exit 3, or 130 when ctx was cancelled) naming the
// file; "-" is not special here.
func openInput(ctx context.Context, path, want string, ok ...input.Kind) (*input.File, error) {
	in, err := input.Open(orBackground(ctx), path)
	if err != nil {
		return nil, cmdutil.InputError(err)
	}
	if err := in.Expect(want, ok...); err != nil {
		in.Close()
		return nil, cmdutil.InputError(err)
	}
	return in, nil
}

// bundleFile is a bundle reader over a sniffed, cancellable input.
type bundleFile struct {
	*traces.Reader
	in *input.File
}

func (b *bundleFile) Close() error {
	b.Reader.Close()
	return b.in.Close()
}

// bundleOver reads the bundle in in (sniffed as zstd); it closes in on error.
func bundleOver(ctx context.Context, in *input.File) (*bundleFile, error) {
	r, err := traces.NewReaderContext(orBackground(ctx), in, in.Name)
	if err != nil {
		in.Close()
		return nil, cmdutil.InputError(err)
	}
	return &bundleFile{r, in}, nil
}

// openBundle opens the bundle at path: a file that is not zstd gets a
// format error saying what it is, a zstd stream that is not a bundle the
// reader's error; both are input errors naming path.
func openBundle(ctx context.Context, path string) (*bundleFile, error) {
	in, err := openInput(ctx, path, wantBundle, input.Zstd, input.Binary)
	if err != nil {
		return nil, err
	}
	if !in.BundleCandidate() {
		err := in.Expect(wantBundle, input.Zstd)
		in.Close()
		return nil, cmdutil.InputError(err)
	}
	return bundleOver(ctx, in)
}

// checksumInput is one `checksum compare` input: a bundle's room.checksum
// events or a text log's room_checksum lines, read through the shared
// sniffer and cancellable opener. The first read uses the sniffed file (a
// FIFO can be opened once); a second one (page localization) reopens it.
func checksumInput(ctx context.Context, path string, info *bundleInfo) (checksum.Source, error) {
	in, err := openInput(ctx, path, wantChecksumFile, input.Zstd, input.Text, input.Binary)
	if err != nil {
		return nil, err
	}
	if !in.BundleCandidate() && in.Kind != input.Text {
		in.Close()
		return nil, cmdutil.InputError(in.Expect(wantChecksumFile, input.Zstd, input.Text))
	}
	first, kind := in, in.Kind
	reopen := func() (*input.File, error) {
		if f := first; f != nil {
			first = nil
			return f, nil
		}
		return openInput(ctx, path, wantChecksumFile, kind)
	}
	if kind == input.Text {
		return &checksumLog{path: path, open: reopen}, nil
	}
	return checksum.EventSource(path, func() (checksum.EventStream, error) {
		f, err := reopen()
		if err != nil {
			return nil, err
		}
		b, err := bundleOver(ctx, f)
		if err != nil {
			return nil, err
		}
		return checksumBundle{bundleStream{b.Reader, info}, b.in}, nil
	}), nil
}

// checksumBundle closes the input under a bundleStream too.
type checksumBundle struct {
	bundleStream
	in *input.File
}

func (c checksumBundle) Close() error {
	err := c.bundleStream.Close()
	c.in.Close()
	return err
}

// checksumLog is checksum.LogFile over a cancellable input.
type checksumLog struct {
	path string
	open func() (*input.File, error)
}

func (l *checksumLog) Name() string { return l.path }

func (l *checksumLog) Each(fn func(*checksum.Record) error) (checksum.InputStats, error) {
	st := checksum.InputStats{Name: l.path, Format: "log"}
	in, err := l.open()
	if err != nil {
		return st, err
	}
	defer in.Close()
	st.LogStats, err = checksum.ScanLog(in, l.path, fn)
	return st, err
}
