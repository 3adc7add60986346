package canary

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// ViolationMarker starts SGLang's frozen one-line kv_canary violation summary
// (sglang/srt/kv_canary/runner/violation_reporter.py). Whatever precedes it on
// a line is a log prefix and is ignored.
const ViolationMarker = "kv_canary violation: "

// Violation is one SGLang kv_canary violation line:
//
//	kv_canary violation: launch_tag=HEAD_K_FULL fail_reason=chain_hash+position slot_idx=17 position=42 stored_token=111 expected_token=0 stored_chain_hash=0x1111111111111111 expected_aux=0x2222222222222222
//
// SGLang writes the fields in this order, space-separated, the two 64-bit
// values as 0x plus 16 hex digits. For write_token / write_position failures
// expected_aux is the expected position; otherwise it is the expected chain
// hash.
type Violation struct {
	LaunchTag       string   `json:"launch_tag"`  // CanaryLaunchTag name, e.g. HEAD_K_FULL, SWEEP_K_FULL, unknown(9999)
	FailReasons     []string `json:"fail_reason"` // labels joined by '+' on the line; empty for "none"
	SlotIdx         int64    `json:"slot_idx"`
	Position        int64    `json:"position"`
	StoredToken     int64    `json:"stored_token"`
	ExpectedToken   int64    `json:"expected_token"`
	StoredChainHash uint64   `json:"stored_chain_hash"`
	ExpectedAux     uint64   `json:"expected_aux"`
}

// FailReason returns the fail_reason field as SGLang writes it ("none" when
// there is no reason).
func (v Violation) FailReason() string {
	if len(v.FailReasons) == 0 {
		return "none"
	}
	return strings.Join(v.FailReasons, "+")
}

// IsWrite reports whether the violation came from the write-side check, where
// expected_aux holds an expected position rather than a chain hash.
func (v Violation) IsWrite() bool {
	for _, r := range v.FailReasons {
		if r == "write_token" || r == "write_position" {
			return true
		}
	}
	return false
}

// AppendText appends the violation in SGLang's one-line format (no newline).
func (v Violation) AppendText(b []byte) ([]byte, error) {
	b = append(b, ViolationMarker...)
	b = append(b, "launch_tag="...)
	b = append(b, v.LaunchTag...)
	b = append(b, " fail_reason="...)
	b = append(b, v.FailReason()...)
	b = append(b, " slot_idx="...)
	b = strconv.AppendInt(b, v.SlotIdx, 10)
	b = append(b, " position="...)
	b = strconv.AppendInt(b, v.Position, 10)
	b = append(b, " stored_token="...)
	b = strconv.AppendInt(b, v.StoredToken, 10)
	b = append(b, " expected_token="...)
	b = strconv.AppendInt(b, v.ExpectedToken, 10)
	b = append(b, " stored_chain_hash="...)
	b = hook.AppendHex64(b, v.StoredChainHash)
	b = append(b, " expected_aux="...)
	b = hook.AppendHex64(b, v.ExpectedAux)
	return b, nil
}

func (v Violation) String() string {
	b, _ := v.AppendText(nil)
	return string(b)
}

// ViolationError is a recognized violation line with a malformed field.
type ViolationError struct {
	Offset int    // byte offset in the line where the bad field's value starts
	Field  string // field name, e.g. "slot_idx"
	Msg    string
}

func (e *ViolationError) Error() string {
	return fmt.Sprintf("kv_canary violation: byte %d: field %s: %s", e.Offset, e.Field, e.Msg)
}

// violationFields are the key=value fields after the marker, in SGLang's order.
var violationFields = [...]string{
	"launch_tag", "fail_reason", "slot_idx", "position",
	"stored_token", "expected_token", "stored_chain_hash", "expected_aux",
}

// ParseViolation recognizes and parses one log line. ok is false (and err
// nil) when the line holds no violation summary, i.e. no
// "kv_canary violation: launch_tag=" after any prefix. When ok is true and err
// is non-nil the line is a recognized violation with a malformed field; err is
// a *ViolationError naming the field and byte offset. A trailing '\r' or
// newline is ignored, and so is anything after expected_aux's value that
// follows a space (fields SGLang might append later).
func ParseViolation(line []byte) (v Violation, ok bool, err error) {
	at := bytes.Index(line, []byte(ViolationMarker+"launch_tag="))
	if at < 0 {
		return Violation{}, false, nil
	}
	line = bytes.TrimRight(line, "\r\n")
	s := scanner{line: line, pos: at + len(ViolationMarker)}
	for i, name := range violationFields {
		if i > 0 && !s.space() {
			return v, true, s.errf(name, "want a space before %s=", name)
		}
		if !s.key(name) {
			return v, true, s.errf(name, "want %s=", name)
		}
		start := s.pos
		val := s.value()
		if len(val) == 0 {
			return v, true, &ViolationError{Offset: start, Field: name, Msg: "empty value"}
		}
		bad := func(msg string) error {
			return &ViolationError{Offset: start, Field: name, Msg: fmt.Sprintf("%s in %s", msg, strconv.Quote(trunc(string(val), 40)))}
		}
		switch name {
		case "launch_tag":
			if !printableToken(val) {
				return v, true, bad("non-printable byte")
			}
			v.LaunchTag = string(val)
		case "fail_reason":
			rs, ok := parseReasons(val)
			if !ok {
				return v, true, bad("want none or labels [a-z0-9_] joined by '+'")
			}
			v.FailReasons = rs
		case "slot_idx", "position", "stored_token", "expected_token":
			n, ok := parseDecimal(val)
			if !ok {
				return v, true, bad("want a decimal integer")
			}
			switch name {
			case "slot_idx":
				v.SlotIdx = n
			case "position":
				v.Position = n
			case "stored_token":
				v.StoredToken = n
			default:
				v.ExpectedToken = n
			}
		default:
			x, ok := parseHex(val)
			if !ok {
				return v, true, bad("want 0x and 1 to 16 hex digits")
			}
			if name == "stored_chain_hash" {
				v.StoredChainHash = x
			} else {
				v.ExpectedAux = x
			}
		}
	}
	return v, true, nil
}

type scanner struct {
	line []byte
	pos  int
}

func (s *scanner) errf(field, format string, a ...any) error {
	return &ViolationError{Offset: s.pos, Field: field, Msg: fmt.Sprintf(format, a...)}
}

func (s *scanner) space() bool {
	if s.pos < len(s.line) && s.line[s.pos] == ' ' {
		s.pos++
		return true
	}
	return false
}

func (s *scanner) key(name string) bool {
	rest := s.line[s.pos:]
	if len(rest) > len(name) && string(rest[:len(name)]) == name && rest[len(name)] == '=' {
		s.pos += len(name) + 1
		return true
	}
	return false
}

// value returns the bytes up to the next space or the end of the line.
func (s *scanner) value() []byte {
	start := s.pos
	for s.pos < len(s.line) && s.line[s.pos] != ' ' {
		s.pos++
	}
	return s.line[start:s.pos]
}

func printableToken(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

func parseReasons(b []byte) ([]string, bool) {
	if string(b) == "none" {
		return nil, true
	}
	var out []string
	for part := range bytes.SplitSeq(b, []byte{'+'}) {
		if len(part) == 0 {
			return nil, false
		}
		for _, c := range part {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
				return nil, false
			}
		}
		out = append(out, string(part))
	}
	return out, true
}

func parseDecimal(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if neg {
		if n > 1<<63 {
			return 0, false
		}
		return -int64(n), true
	}
	if n > 1<<63-1 {
		return 0, false
	}
	return int64(n), true
}

func parseHex(b []byte) (uint64, bool) {
	if len(b) < 3 || b[0] != '0' || (b[1] != 'x' && b[1] != 'X') || len(b) > 18 {
		return 0, false
	}
	x, err := strconv.ParseUint(string(b[2:]), 16, 64) // 1 to 16 digits: no overflow, no sign
	return x, err == nil
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
