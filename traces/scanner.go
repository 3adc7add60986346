package traces

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
)

// frameResult is one step of the frame scanner: a decoded frame, or the end
// of input, with the damage met on the way, in file order.
type frameResult struct {
	content   []byte // decoded frame; nil at the end
	frameNo   uint64 // frames met so far, this one included
	off       int64  // offset of this frame
	end       int64  // offset after it
	skips     []Skip
	done      bool // end of input (nothing in content)
	truncated string
	err       error // reading the input failed
}

// frameScanner walks a bundle frame by frame and decodes complete frames. It
// runs either on the reader's goroutine or, for decode-ahead, on its own; it
// never refers to the Reader, so an abandoned Reader can be collected.
type frameScanner struct {
	name    string
	src     source
	frameNo uint64
	stop    *atomic.Bool // set when the reader's context is done
	ctx     context.Context

	decoded int64 // bytes decoded so far, for the decompression budget
	ratio   int64 // the budget's decoded bytes per compressed byte (decodeRatio)

	// A frame too large to decode whole is streamed in pieces of streamChunk.
	stream     frameStream
	streaming  bool
	streamOff  int64 // offset of the streamed frame
	streamUsed int64 // bytes of it decoded so far
	streamDec  *zstd.Decoder
}

// allowance is what a reader may have decoded once it has read the file up
// to compressed byte off, at ratio decoded bytes per compressed byte
// (FORMAT.md "Decompression budget").
func allowance(off, ratio int64) int64 { return decodeSlack + ratio*off }

// budgetMark starts every damage reason of the budget; the reader finds
// them by it.
const budgetMark = "over the decompression budget: "

// budgetReason is the damage reason for a frame over the budget.
func budgetReason(decoded, off, ratio int64) string {
	return fmt.Sprintf(budgetMark+"%d bytes decoded from the first %d compressed bytes (limit %d + %d per compressed byte): a decompression bomb, or a bundle re-compressed at a higher ratio? rest of the frame skipped",
		decoded, off, decodeSlack, ratio)
}

// next decodes the next complete frame into dst[:0], skipping damage. A
// large frame comes as several results with the same frameNo.
func (s *frameScanner) next(dst []byte) frameResult {
	dec, _ := decoder() // checked in newReader
	var res frameResult
	for {
		if s.stop != nil && s.stop.Load() {
			res.err = fmt.Errorf("read bundle %s at byte %d: interrupted (%w)", s.name, s.src.off, context.Cause(s.ctx))
			res.done = true
			return s.finish(res)
		}
		if s.streaming {
			if cap(dst) < streamChunk || cap(dst) > 4*frameBytes {
				dst = make([]byte, 0, streamChunk)
			}
			if s.nextChunk(dst[:0], &res) || res.done {
				return s.finish(res)
			}
			continue
		}
		off := s.src.off
		status, n, bound := s.src.scanFrame()
		if s.src.err != nil {
			res.err = fmt.Errorf("read bundle %s at byte %d: %w", s.name, s.src.off, s.src.err)
			res.done = true
			return res
		}
		switch status {
		case frameEnd:
			res.done = true
			return s.finish(res)
		case frameTruncated:
			s.frameNo++
			// The scan read to the end of input. A frame magic further on
			// means a damaged block header claimed bytes the frame does
			// not have, not a cut file: skip to that frame.
			if i := bytes.Index(s.src.peek(min(4, n), n), zstdMagicBytes); i >= 0 {
				skip := min(4, n) + i
				s.src.consume(skip)
				res.skips = append(res.skips, Skip{Position{Frame: s.frameNo, Offset: off},
					fmt.Sprintf("damaged frame (%d bytes): its block headers run past the end of the file, but a frame starts at byte %d", skip, off+int64(skip))})
				continue
			}
			res.truncated = fmt.Sprintf("file ends inside frame %d (%d bytes from byte %d)", s.frameNo, n, off)
			res.done = true
			return s.finish(res)
		case frameGarbage:
			skipped := s.src.resync()
			res.skips = append(res.skips, Skip{Position{Offset: off}, fmt.Sprintf("%d bytes that are not a zstd frame", skipped)})
			continue
		case frameLarge:
			s.frameNo++
			s.startStream(&res)
			if res.done {
				return s.finish(res)
			}
			continue
		case frameSkippable:
			if !s.src.skip(n) {
				res.truncated = fmt.Sprintf("file ends inside a skippable frame at byte %d", off)
				res.done = true
				return s.finish(res)
			}
			continue
		}
		s.frameNo++
		if end := off + int64(n); s.decoded+bound > allowance(end, s.ratio) {
			s.src.consume(n)
			res.skips = append(res.skips, Skip{Position{Frame: s.frameNo, Offset: off},
				budgetReason(s.decoded+bound, end, s.ratio) + fmt.Sprintf(" (a frame of %d bytes that may decode to %d)", n, bound)})
			continue
		}
		if cap(dst) > 4*frameBytes {
			dst = nil // do not keep a huge buffer after one huge frame
		}
		content, err := dec.DecodeAll(s.src.peek(0, n), dst[:0])
		if err != nil {
			// A damaged block header can make the scan run past the frame's
			// real end and swallow the frames after it: a frame magic inside
			// the bytes scanned means one starts there (if that is a false
			// match inside compressed data, it fails to decode in turn).
			skip := n
			if i := bytes.Index(s.src.peek(4, n), zstdMagicBytes); i >= 0 {
				skip = 4 + i
			}
			s.src.consume(skip)
			res.skips = append(res.skips, Skip{Position{Frame: s.frameNo, Offset: off}, fmt.Sprintf("undecodable frame (%d bytes): %s", skip, decodeError(err))})
			dst = content
			continue
		}
		s.src.consume(n)
		s.decoded += int64(len(content))
		res.content = content
		res.off = off
		return s.finish(res)
	}
}

// decodeError words a zstd error for a damage report.
func decodeError(err error) string {
	if errors.Is(err, zstd.ErrCRCMismatch) {
		return "checksum failure: the frame's content checksum does not match (damaged bytes)"
	}
	return err.Error()
}

// streamChunk is how much of a large frame one result carries.
const streamChunk = 1 << 20

func (s *frameScanner) startStream(res *frameResult) {
	s.streamOff, s.streamUsed = s.src.off, 0
	pos := Position{Frame: s.frameNo, Offset: s.streamOff}
	s.stream.start(&s.src)
	s.streaming = true
	if s.streamDec == nil {
		d, err := zstd.NewReader(nil,
			// Decode on this goroutine: the reader already decodes ahead.
			zstd.WithDecoderConcurrency(1),
			// The same window cap as whole frames (what the RFC says every
			// decoder supports; zstd's levels 1-19 stay within it).
			zstd.WithDecoderMaxWindow(maxWindowBytes),
			// For streams the memory cap is the window's; the decompression
			// budget bounds the total.
			zstd.WithDecoderMaxMemory(1<<40),
			// One large frame at a time: do not keep big buffers.
			zstd.WithDecoderLowmem(true),
		)
		if err != nil {
			res.skips = append(res.skips, Skip{pos, "large frame: zstd stream decoder: " + err.Error()})
			s.endStream(res, pos)
			return
		}
		s.streamDec = d
	}
	if err := s.streamDec.Reset(&s.stream); err != nil {
		res.skips = append(res.skips, Skip{pos, "undecodable large frame: " + decodeError(err)})
		s.endStream(res, pos)
	}
}

// nextChunk decodes the next piece of the streamed frame into dst and
// reports whether res now holds content. At the frame's end, on damage and
// over the budget it leaves stream mode (res may gain a skip or a
// truncation).
func (s *frameScanner) nextChunk(dst []byte, res *frameResult) bool {
	pos := Position{Frame: s.frameNo, Offset: s.streamOff}
	n, err := io.ReadFull(s.streamDec, dst[:cap(dst)])
	if n > 0 {
		s.decoded += int64(n)
		if s.decoded > allowance(s.src.off, s.ratio) {
			res.skips = append(res.skips, Skip{pos, budgetReason(s.decoded, s.src.off, s.ratio)})
			s.endStream(res, pos)
			return false
		}
		s.streamUsed += int64(n)
		res.content, res.off = dst[:n], s.streamOff
	}
	switch {
	case err == nil: // more to come
	case (err == io.EOF || err == io.ErrUnexpectedEOF) && s.stream.done():
		s.streaming = false // the frame is complete
	default:
		what := "undecodable large frame"
		if s.streamUsed > 0 {
			what = fmt.Sprintf("large frame damaged after %d decoded bytes (those were used)", s.streamUsed)
		}
		if !s.stream.cut {
			res.skips = append(res.skips, Skip{pos, what + ": " + decodeError(err)})
		}
		s.endStream(res, pos)
	}
	return n > 0
}

// endStream leaves the streamed frame: it skips the frame's remaining bytes,
// resynchronising on a bad block header, and records a cut input.
func (s *frameScanner) endStream(res *frameResult, pos Position) {
	s.streaming = false
	if s.stream.done() || !s.stream.bad && !s.stream.cut && s.stream.drain() {
		return
	}
	if s.stream.cut {
		res.truncated = fmt.Sprintf("file ends inside frame %d (from byte %d)", pos.Frame, pos.Offset)
		res.done = true
		return
	}
	from := s.src.off
	s.src.resync()
	res.skips = append(res.skips, Skip{Position{Offset: from}, fmt.Sprintf("%d bytes that are not a zstd frame (a bad block header in frame %d)", s.src.off-from, pos.Frame)})
}

func (s *frameScanner) finish(res frameResult) frameResult {
	res.frameNo = s.frameNo
	res.end = s.src.off
	return res
}

// decodeAhead runs a frameScanner on its own goroutine, one frame ahead of the
// reader, so decompression and line handling use two cores.
type decodeAhead struct {
	results chan frameResult
	free    chan []byte // decoded buffers the reader is done with
	stop    *stopper
}

type stopper struct {
	once sync.Once
	ch   chan struct{}
}

func (s *stopper) stop() { s.once.Do(func() { close(s.ch) }) }

// aheadFrames is how many decoded frames may wait for the reader.
const aheadFrames = 2

func startDecodeAhead(s *frameScanner) *decodeAhead {
	a := &decodeAhead{
		results: make(chan frameResult, aheadFrames),
		free:    make(chan []byte, aheadFrames+2),
		stop:    &stopper{ch: make(chan struct{})},
	}
	go func(results chan<- frameResult, free <-chan []byte, stop <-chan struct{}) {
		defer close(results)
		for {
			var buf []byte
			select {
			case buf = <-free:
			default:
			}
			res := s.next(buf)
			select {
			case results <- res:
			case <-stop:
				return
			}
			if res.done {
				return
			}
		}
	}(a.results, a.free, a.stop.ch)
	return a
}

// recycle hands a decoded buffer back for reuse; dropped when the pool is full.
func (a *decodeAhead) recycle(buf []byte) {
	if buf == nil {
		return
	}
	select {
	case a.free <- buf[:0]:
	default:
	}
}
