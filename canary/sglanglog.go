package canary

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// LogViolation is a violation found in a log, with where it was found.
type LogViolation struct {
	Violation
	File string `json:"file"`
	Line int    `json:"line"`
	// Step is step_when_pumped from the report's footer line (SGLang's outer
	// step counter when the violation ring was read); -1 when absent.
	Step int64 `json:"step"`
}

// Finding converts the violation into a canary finding.
func (v *LogViolation) Finding() *hook.Finding {
	ev := map[string]string{
		"source":            "sglang-kv-canary",
		"file":              v.File,
		"line":              strconv.Itoa(v.Line),
		"launch_tag":        v.LaunchTag,
		"fail_reason":       v.FailReason(),
		"slot_idx":          strconv.FormatInt(v.SlotIdx, 10),
		"position":          strconv.FormatInt(v.Position, 10),
		"stored_token":      strconv.FormatInt(v.StoredToken, 10),
		"expected_token":    strconv.FormatInt(v.ExpectedToken, 10),
		"stored_chain_hash": hook.Hex64(v.StoredChainHash).String(),
		"expected_aux":      hook.Hex64(v.ExpectedAux).String(),
	}
	if v.Step >= 0 {
		ev["step"] = strconv.FormatInt(v.Step, 10)
	}
	return &hook.Finding{
		Analyzer: AnalyzerName,
		Severity: hook.SevError,
		Summary: fmt.Sprintf("SGLang kv_canary violation at %s:%d: launch_tag=%s fail_reason=%s slot %d position %d",
			v.File, v.Line, strconv.Quote(v.LaunchTag), v.FailReason(), v.SlotIdx, v.Position),
		Evidence: ev,
	}
}

// LogScan is what ScanLog found in one SGLang log.
type LogScan struct {
	File       string            `json:"file"`
	Lines      int               `json:"lines"`
	Violations uint64            `json:"violations"`
	Other      int               `json:"other_lines"`         // lines holding no violation summary: ordinary log lines and garbage
	Oversized  int               `json:"oversized_lines"`     // lines longer than the line cap, scanned by their head only
	ByReason   map[string]uint64 `json:"by_reason"`           // each fail_reason label counted once per violation
	ByTag      map[string]uint64 `json:"by_launch_tag"`       // violations per launch_tag
	Samples    []LogViolation    `json:"samples"`             // the first violations, in file order
	Malformed  uint64            `json:"malformed"`           // recognized violation lines with a bad field
	Errors     []string          `json:"errors,omitempty"`    // the first malformed-line errors, "file:line: ..."
	Truncated  bool              `json:"truncated,omitempty"` // more violations or errors than were kept
}

// Findings reports whether the log holds any SGLang canary violation.
func (s *LogScan) Findings() bool { return s.Violations > 0 }

// LogOptions bound what ScanLog keeps.
type LogOptions struct {
	MaxSamples   int // violations kept in Samples; 0 means 64
	MaxErrors    int // error messages kept; 0 means 32
	MaxLineBytes int // longest line examined; 0 means 1 MiB
}

// footerWindow is how many lines after a violation line its footer
// ("total_violations=… step_when_pumped=…") may appear: SGLang's report is
// the summary line, a header, the kind, the reasons, two body lines, then it.
const footerWindow = 8

// ScanLog reads an SGLang server log and parses every kv_canary violation
// line in it. Lines that hold no violation are counted, whatever bytes they
// contain; a recognized line with a malformed field is counted and reported
// as "name:line: …" in Errors. The only error ScanLog returns is a read error,
// naming the file and the line it occurred on; what was scanned until then is
// returned with it.
func ScanLog(r io.Reader, name string, opts LogOptions) (*LogScan, error) {
	if opts.MaxSamples == 0 {
		opts.MaxSamples = 64
	}
	if opts.MaxErrors == 0 {
		opts.MaxErrors = 32
	}
	if opts.MaxLineBytes == 0 {
		opts.MaxLineBytes = 1 << 20
	}
	s := &LogScan{File: name, ByReason: map[string]uint64{}, ByTag: map[string]uint64{}, Samples: []LogViolation{}}
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	pending := -1 // index in Samples of the last violation still waiting for its footer
	pendingLine := 0
	for {
		var oversized bool
		var err error
		line, oversized, err = readLine(br, line[:0], opts.MaxLineBytes)
		if len(line) > 0 || (err == nil) {
			s.Lines++
			if oversized {
				s.Oversized++
			}
			v, ok, perr := ParseViolation(line)
			switch {
			case !ok:
				s.Other++
				if pending >= 0 && s.Lines-pendingLine <= footerWindow {
					if step, found := footerStep(line); found {
						s.Samples[pending].Step = step
						pending = -1
					}
				}
			case perr != nil:
				s.Malformed++
				if len(s.Errors) < opts.MaxErrors {
					s.Errors = append(s.Errors, fmt.Sprintf("%s:%d: %v", name, s.Lines, perr))
				} else {
					s.Truncated = true
				}
			default:
				s.Violations++
				s.ByTag[v.LaunchTag]++
				for _, r := range v.FailReasons {
					s.ByReason[r]++
				}
				if len(v.FailReasons) == 0 {
					s.ByReason["none"]++
				}
				pending = -1
				if len(s.Samples) < opts.MaxSamples {
					s.Samples = append(s.Samples, LogViolation{Violation: v, File: name, Line: s.Lines, Step: -1})
					pending, pendingLine = len(s.Samples)-1, s.Lines
				} else {
					s.Truncated = true
				}
			}
		}
		if err == io.EOF {
			return s, nil
		}
		if err != nil {
			return s, fmt.Errorf("read %s: line %d: %w", name, s.Lines+1, err)
		}
	}
}

// readLine reads one line without its newline into dst, keeping at most limit
// bytes and discarding the rest of a longer line (oversized is then true). It
// returns io.EOF with the last, unterminated line's bytes.
func readLine(br *bufio.Reader, dst []byte, limit int) (line []byte, oversized bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		body := chunk
		if err == nil {
			body = chunk[:len(chunk)-1]
		}
		if room := limit - len(dst); room >= len(body) {
			dst = append(dst, body...)
		} else {
			dst = append(dst, body[:max(room, 0)]...)
			oversized = true
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return dst, oversized, err
	}
}

// footerStep extracts step_when_pumped from SGLang's report footer line
// ("  total_violations=1 ring_overflow=False step_when_pumped=7").
func footerStep(line []byte) (int64, bool) {
	if !bytes.Contains(line, []byte("total_violations=")) {
		return 0, false
	}
	const key = "step_when_pumped="
	at := bytes.Index(line, []byte(key))
	if at < 0 {
		return 0, false
	}
	rest := line[at+len(key):]
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	n, ok := parseDecimal(rest[:end])
	return n, ok
}
