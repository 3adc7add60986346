package traces

import (
	"fmt"
	"sync"
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
}

// next decodes the next complete frame into dst[:0], skipping damage.
func (s *frameScanner) next(dst []byte) frameResult {
	dec, _ := decoder() // checked in newReader
	var res frameResult
	for {
		off := s.src.off
		status, n := s.src.scanFrame()
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
			res.truncated = fmt.Sprintf("file ends inside frame %d (%d bytes from byte %d)", s.frameNo, n, off)
			res.done = true
			return s.finish(res)
		case frameGarbage:
			skipped := s.src.resync()
			res.skips = append(res.skips, Skip{Position{Offset: off}, fmt.Sprintf("%d bytes that are not a zstd frame", skipped)})
			continue
		case frameTooLarge:
			s.frameNo++
			skipped := s.src.resync()
			res.skips = append(res.skips, Skip{Position{Frame: s.frameNo, Offset: off},
				fmt.Sprintf("frame larger than %d bytes (%d bytes skipped to the next frame magic)", maxFrameBytes, skipped)})
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
		if cap(dst) > 4*frameBytes {
			dst = nil // do not keep a huge buffer after one huge frame
		}
		content, err := dec.DecodeAll(s.src.peek(0, n), dst[:0])
		s.src.consume(n)
		if err != nil {
			res.skips = append(res.skips, Skip{Position{Frame: s.frameNo, Offset: off}, fmt.Sprintf("undecodable frame (%d bytes): %v", n, err)})
			dst = content
			continue
		}
		res.content = content
		res.off = off
		return s.finish(res)
	}
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
