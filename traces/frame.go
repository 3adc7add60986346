package traces

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
)

// source is a read buffer over the bundle that keeps the current frame's bytes
// contiguous, so a frame is decoded in place and can be rescanned for a frame
// magic after damage.
type source struct {
	r     io.Reader
	buf   []byte
	start int   // first unconsumed byte in buf
	off   int64 // file offset of buf[start]
	eof   bool
	err   error // read error other than io.EOF
}

const readChunk = 256 << 10

// avail is the number of buffered unconsumed bytes.
func (s *source) avail() int { return len(s.buf) - s.start }

// fill buffers at least n unconsumed bytes; false when the input ends first.
func (s *source) fill(n int) bool {
	for s.avail() < n {
		if s.eof {
			return false
		}
		if s.start > 0 && (cap(s.buf)-len(s.buf) < readChunk || s.start > len(s.buf)/2) {
			m := copy(s.buf, s.buf[s.start:])
			s.buf = s.buf[:m]
			s.start = 0
		}
		if need := max(n-s.avail(), readChunk); cap(s.buf)-len(s.buf) < need {
			// Grow geometrically: a large frame arrives in many reads.
			nb := make([]byte, len(s.buf), max(len(s.buf)+need, 2*cap(s.buf)))
			copy(nb, s.buf)
			s.buf = nb
		}
		m, err := s.r.Read(s.buf[len(s.buf):cap(s.buf)])
		s.buf = s.buf[:len(s.buf)+m]
		if err != nil {
			s.eof = true
			if err != io.EOF {
				s.err = err
			}
		}
	}
	return true
}

// consume drops n buffered bytes.
func (s *source) consume(n int) {
	s.start += n
	s.off += int64(n)
}

// peek returns the unconsumed bytes [i, j).
func (s *source) peek(i, j int) []byte { return s.buf[s.start+i : s.start+j] }

// RFC 8878 constants.
const (
	zstdMagic         = 0xFD2FB528
	skippableMask     = 0xFFFFFFF0
	skippableMagic    = 0x184D2A50
	blockMaxSize      = 128 << 10
	frameHeaderMaxLen = 4 + 1 + 1 + 4 + 8
)

var zstdMagicBytes = []byte{0x28, 0xb5, 0x2f, 0xfd}

// frameStatus says what scanning a frame found.
type frameStatus int

const (
	frameOK        frameStatus = iota // n bytes of one zstd frame
	frameSkippable                    // n bytes of a skippable frame (may exceed the buffer)
	frameEnd                          // clean end of input
	frameTruncated                    // input ends inside a frame
	frameGarbage                      // not a frame header here
	frameLarge                        // a frame over maxFrameBytes, compressed or decoded: stream it
)

// frameHeaderLen is the length of a zstd frame header (magic included)
// with frame header descriptor fhd.
func frameHeaderLen(fhd byte) int {
	single := fhd&0x20 != 0
	p := 5
	if !single {
		p++ // Window_Descriptor
	}
	p += [4]int{0, 1, 2, 4}[fhd&3] // Dictionary_ID
	switch fhd >> 6 {              // Frame_Content_Size
	case 0:
		if single {
			p++
		}
	case 1:
		p += 2
	case 2:
		p += 4
	case 3:
		p += 8
	}
	return p
}

// blockHeader parses a 3-byte zstd block header: the bytes of the block
// that follow it, the most it decodes to, whether it is the frame's last,
// and false for a header no encoder writes (reserved type, oversize).
func blockHeader(h []byte) (body, decoded int, last, ok bool) {
	bh := uint32(h[0]) | uint32(h[1])<<8 | uint32(h[2])<<16
	last = bh&1 != 0
	typ := (bh >> 1) & 3
	size := int(bh >> 3)
	if typ == 3 || size > blockMaxSize {
		return 0, 0, false, false
	}
	switch typ {
	case 0: // raw
		return size, size, last, true
	case 1: // RLE: one byte repeated size times
		return 1, size, last, true
	}
	// Compressed: at most Block_Maximum_Size decoded (RFC 8878 §3.1.1.2.4).
	return size, blockMaxSize, last, true
}

// scanFrame parses the zstd frame at the read position (headers only, no
// decoding) and returns its length and the most it can decode to. It
// buffers the whole frame for frameOK. A frame whose compressed bytes or
// decoded bound pass maxFrameBytes is frameLarge, found before it is
// buffered whole; frameStream reads it instead.
func (s *source) scanFrame() (status frameStatus, n int, bound int64) {
	if !s.fill(4) {
		if s.avail() == 0 {
			return frameEnd, 0, 0
		}
		return frameTruncated, s.avail(), 0
	}
	magic := binary.LittleEndian.Uint32(s.peek(0, 4))
	if magic&skippableMask == skippableMagic {
		if !s.fill(8) {
			return frameTruncated, s.avail(), 0
		}
		return frameSkippable, 8 + int(binary.LittleEndian.Uint32(s.peek(4, 8))), 0
	}
	if magic != zstdMagic {
		return frameGarbage, 0, 0
	}
	if !s.fill(5) {
		return frameTruncated, s.avail(), 0
	}
	fhd := s.peek(4, 5)[0]
	if fhd&0x08 != 0 { // reserved bit must be zero
		return frameGarbage, 0, 0
	}
	p := frameHeaderLen(fhd)
	for {
		if !s.fill(p + 3) {
			return frameTruncated, s.avail(), 0
		}
		body, dec, last, ok := blockHeader(s.peek(p, p+3))
		if !ok {
			return frameGarbage, 0, 0
		}
		p += 3 + body
		bound += int64(dec)
		if p > maxFrameBytes || bound > maxFrameBytes {
			return frameLarge, 0, 0
		}
		if last {
			break
		}
	}
	if fhd&0x04 != 0 {
		p += 4 // Content_Checksum
	}
	if !s.fill(p) {
		return frameTruncated, s.avail(), 0
	}
	return frameOK, p, bound
}

// frameStream passes the bytes of one zstd frame from the source to a
// streaming decoder, reading block headers to stop exactly at the frame's
// end, so a frame too large to hold whole is decoded in pieces.
type frameStream struct {
	src    *source
	remain int  // bytes of the current piece still to pass
	next   int  // what comes after it: pieceBlock, pieceChecksum, pieceDone
	ck     int  // checksum bytes after the last block
	bad    bool // a block header no encoder writes
	cut    bool // the input ended inside the frame
}

const (
	pieceBlock = iota
	pieceChecksum
	pieceDone
)

var errBadBlock = errors.New("bad block header")

// start points fs at the frame at the source's read position; its header
// has been checked by scanFrame.
func (fs *frameStream) start(src *source) {
	fhd := src.peek(4, 5)[0]
	*fs = frameStream{src: src, remain: frameHeaderLen(fhd), next: pieceBlock}
	if fhd&0x04 != 0 {
		fs.ck = 4
	}
}

// done reports whether the whole frame has been passed on.
func (fs *frameStream) done() bool { return fs.remain == 0 && fs.next == pieceDone }

func (fs *frameStream) Read(p []byte) (int, error) {
	for fs.remain == 0 {
		switch fs.next {
		case pieceBlock:
			if !fs.src.fill(3) {
				fs.cut = true
				return 0, io.ErrUnexpectedEOF
			}
			body, _, last, ok := blockHeader(fs.src.peek(0, 3))
			if !ok {
				fs.bad = true
				return 0, errBadBlock
			}
			fs.remain = 3 + body
			if last {
				fs.next = pieceChecksum
			}
		case pieceChecksum:
			fs.remain, fs.next = fs.ck, pieceDone
		default:
			return 0, io.EOF
		}
	}
	if fs.src.avail() == 0 && !fs.src.fill(1) {
		fs.cut = true
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p, fs.src.peek(0, min(fs.remain, fs.src.avail())))
	fs.src.consume(n)
	fs.remain -= n
	return n, nil
}

// drain passes over the rest of the frame without decoding it; false when
// the input ends or a block header is bad first.
func (fs *frameStream) drain() bool {
	for !fs.done() {
		if fs.remain > 0 {
			if !fs.src.skip(fs.remain) {
				fs.cut = true
				return false
			}
			fs.remain = 0
			continue
		}
		if _, err := fs.Read(nil); err != nil && err != io.EOF {
			return false
		}
	}
	return true
}

// resync skips forward to the next zstd frame magic after the read position
// and returns the number of bytes skipped (to the end of input if none).
func (s *source) resync() int64 {
	from := s.off
	s.consume(1)
	for {
		if i := bytes.Index(s.peek(0, s.avail()), zstdMagicBytes); i >= 0 {
			s.consume(i)
			return s.off - from
		}
		keep := min(s.avail(), len(zstdMagicBytes)-1)
		s.consume(s.avail() - keep)
		if !s.fill(keep + 1) {
			s.consume(s.avail())
			return s.off - from
		}
	}
}

// skip drops n bytes that may not all be buffered; false if input ends first.
func (s *source) skip(n int) bool {
	for n > 0 {
		if s.avail() == 0 && !s.fill(1) {
			return false
		}
		k := min(n, s.avail())
		s.consume(k)
		n -= k
	}
	return true
}
