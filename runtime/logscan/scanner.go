package logscan

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

const readChunk = 256 << 10

// Scanner reads lines from a reader and parses each into a Record.
//
//	sc := logscan.NewScanner(f, "server.log", logscan.Options{})
//	for sc.Scan() {
//		rec := sc.Record()
//		...
//	}
//	if err := sc.Err(); err != nil { ... }
//
// Lines longer than Options.MaxLine are parsed by their first MaxLine bytes
// and reported with Long set; the rest of such a line is skipped. A final line without a newline
// is returned at EOF. In follow mode (SetFollow) a partial last line is kept
// instead and Scan may be called again once the reader has more data.
type Scanner struct {
	r      io.Reader
	name   string
	p      *Parser
	max    int
	follow bool

	buf   []byte
	start int // first unconsumed byte
	end   int // end of valid data
	eof   bool
	err   error

	line int64
	off  int64 // bytes read from r, for the position in read errors
	long bool  // discarding the rest of an over-long line
	rec  Record
}

// NewScanner returns a scanner reading r; name identifies the input in errors.
func NewScanner(r io.Reader, name string, opts Options) *Scanner {
	max := opts.maxLine()
	return &Scanner{r: r, name: name, p: NewParser(opts), max: max, buf: make([]byte, min(readChunk, max+4096))}
}

// SetFollow switches follow mode on: at EOF a partial last line is held back
// and Scan can be retried later (Tail uses this). Flush returns the held line.
func (s *Scanner) SetFollow(on bool) { s.follow = on }

// Reset points the scanner at a new reader (a rotated or truncated file),
// dropping buffered data but keeping the line count.
func (s *Scanner) Reset(r io.Reader) {
	s.r, s.start, s.end, s.eof, s.err, s.long, s.off = r, 0, 0, false, nil, false, 0
}

// Record returns the record of the last line Scan returned. It is reused by
// the next call to Scan.
func (s *Scanner) Record() *Record { return &s.rec }

// Lines is the number of lines returned so far.
func (s *Scanner) Lines() int64 { return s.line }

// Err returns the first read error other than io.EOF, naming the input.
func (s *Scanner) Err() error { return s.err }

// read is the number of bytes read from the reader since NewScanner or Reset.
func (s *Scanner) read() int64 { return s.off }

// Buffered is the number of bytes of a partial line held back in follow mode.
func (s *Scanner) Buffered() int { return s.end - s.start }

// Scan advances to the next line. It returns false at EOF or on a read error.
func (s *Scanner) Scan() bool {
	for {
		if i := bytes.IndexByte(s.buf[s.start:s.end], '\n'); i >= 0 {
			line := s.buf[s.start : s.start+i]
			s.start += i + 1
			if s.long {
				// The tail of an over-long line: it was already reported.
				s.long = false
				continue
			}
			s.emit(line, len(line) > s.max)
			return true
		}
		// No newline in the buffer.
		if s.end-s.start > s.max {
			// Over-long line: parse its first MaxLine bytes once (as
			// canary.ScanLog does, so both find a violation at its start),
			// then discard until its newline.
			wasLong := s.long
			if !wasLong {
				s.emit(s.buf[s.start:s.start+s.max], true)
			}
			s.start, s.end, s.long = 0, 0, true
			if !wasLong {
				return true
			}
		}
		if s.eof || s.err != nil {
			return s.atEOF()
		}
		if !s.fill() {
			return s.atEOF()
		}
	}
}

// atEOF handles the end of the data read so far.
func (s *Scanner) atEOF() bool {
	if s.follow {
		s.eof = false // retry on the next Scan
		return false
	}
	if s.end > s.start && !s.long {
		line := s.buf[s.start:s.end]
		s.start = s.end
		s.emit(line, len(line) > s.max)
		return true
	}
	s.start, s.end, s.long = 0, 0, false
	return false
}

// Flush returns, in follow mode, the partial last line held back (a writer
// that stopped mid-line) as a final record. It reports false when there was none.
func (s *Scanner) Flush() bool {
	if s.end > s.start && !s.long {
		line := s.buf[s.start:s.end]
		s.start, s.end = 0, 0
		s.emit(line, len(line) > s.max)
		return true
	}
	s.start, s.end, s.long = 0, 0, false
	return false
}

// fill reads more data, compacting and growing the buffer as needed. It
// reports whether any bytes arrived.
func (s *Scanner) fill() bool {
	if s.start > 0 {
		copy(s.buf, s.buf[s.start:s.end])
		s.end -= s.start
		s.start = 0
	}
	if s.end == len(s.buf) {
		n := min(2*len(s.buf), s.max+readChunk)
		if n <= len(s.buf) {
			n = len(s.buf) + readChunk
		}
		nb := make([]byte, n)
		copy(nb, s.buf[:s.end])
		s.buf = nb
	}
	for tries := 0; tries < 100; tries++ {
		n, err := s.r.Read(s.buf[s.end:])
		s.end += n
		s.off += int64(n)
		if err != nil {
			if errors.Is(err, io.EOF) {
				s.eof = true
			} else {
				s.err = fmt.Errorf("read %s at byte %d: %w", s.name, s.off, err)
			}
			return n > 0
		}
		if n > 0 {
			return true
		}
	}
	s.err = fmt.Errorf("read %s at byte %d: %w", s.name, s.off, io.ErrNoProgress)
	return false
}

func (s *Scanner) emit(line []byte, long bool) {
	s.line++
	if long {
		line = line[:min(len(line), s.max)]
	}
	s.p.Parse(line, s.line, &s.rec)
	s.rec.Long = long
}
