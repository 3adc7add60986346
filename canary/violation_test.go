package canary

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

const sglangLine = "kv_canary violation: launch_tag=HEAD_K_FULL fail_reason=chain_hash+position+real_kv_hash " +
	"slot_idx=17 position=42 stored_token=111 expected_token=0 stored_chain_hash=0x1111111111111111 " +
	"expected_aux=0x2222222222222222"

func TestParseViolation(t *testing.T) {
	full := Violation{
		LaunchTag: "HEAD_K_FULL", FailReasons: []string{"chain_hash", "position", "real_kv_hash"},
		SlotIdx: 17, Position: 42, StoredToken: 111, ExpectedToken: 0,
		StoredChainHash: 0x1111111111111111, ExpectedAux: 0x2222222222222222,
	}
	cases := []struct {
		name      string
		line      string
		ok        bool
		want      *Violation
		errField  string
		errOffset int
	}{
		{name: "bare", line: sglangLine, ok: true, want: &full},
		{name: "python logging prefix", line: "[2026-11-29 09:00:01 TP0] " + sglangLine, ok: true, want: &full},
		{name: "raise mode", line: "RuntimeError: " + sglangLine + "\r\n", ok: true, want: &full},
		{name: "trailing fields ignored", line: sglangLine + " future=1", ok: true, want: &full},
		{name: "write violation", ok: true,
			line: "W kv_canary violation: launch_tag=SWEEP_K_FULL fail_reason=write_token slot_idx=3 position=-1 stored_token=999 expected_token=888 stored_chain_hash=0xdeadbeefcafebabe expected_aux=0x000000000000002b",
			want: &Violation{LaunchTag: "SWEEP_K_FULL", FailReasons: []string{"write_token"}, SlotIdx: 3, Position: -1, StoredToken: 999, ExpectedToken: 888, StoredChainHash: 0xdeadbeefcafebabe, ExpectedAux: 43}},
		{name: "none and unknown tag", ok: true,
			line: "kv_canary violation: launch_tag=unknown(9999) fail_reason=none slot_idx=0 position=0 stored_token=0 expected_token=0 stored_chain_hash=0x0 expected_aux=0xFFFFFFFFFFFFFFFF",
			want: &Violation{LaunchTag: "unknown(9999)", ExpectedAux: ^uint64(0)}},
		{name: "unrelated line", line: "[2026] Decode batch. #running-req: 3", ok: false},
		{name: "marker without fields", line: "assertNotIn(\"kv_canary violation:\", log)", ok: false},
		{name: "empty", line: "", ok: false},
		{name: "bad slot", line: strings.Replace(sglangLine, "slot_idx=17", "slot_idx=1x7", 1), ok: true, errField: "slot_idx", errOffset: strings.Index(sglangLine, "slot_idx=") + len("slot_idx=")},
		{name: "hex too long", line: strings.Replace(sglangLine, "0x2222222222222222", "0x22222222222222221", 1), ok: true, errField: "expected_aux"},
		{name: "hex without prefix", line: strings.Replace(sglangLine, "0x1111111111111111", "1111111111111111", 1), ok: true, errField: "stored_chain_hash"},
		{name: "reordered", line: strings.Replace(sglangLine, "slot_idx=17 position=42", "position=42 slot_idx=17", 1), ok: true, errField: "slot_idx"},
		{name: "truncated", line: sglangLine[:strings.Index(sglangLine, " expected_token")], ok: true, errField: "expected_token"},
		{name: "double space", line: strings.Replace(sglangLine, " position=", "  position=", 1), ok: true, errField: "position"},
		{name: "empty reason label", line: strings.Replace(sglangLine, "chain_hash+position", "chain_hash++position", 1), ok: true, errField: "fail_reason"},
		{name: "empty value", line: strings.Replace(sglangLine, "stored_token=111", "stored_token=", 1), ok: true, errField: "stored_token"},
		{name: "control byte in tag", line: strings.Replace(sglangLine, "HEAD_K_FULL", "HEAD\x1b[31m", 1), ok: true, errField: "launch_tag"},
		{name: "int64 overflow", line: strings.Replace(sglangLine, "position=42", "position=9223372036854775808", 1), ok: true, errField: "position"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, ok, err := ParseViolation([]byte(c.line))
			if ok != c.ok {
				t.Fatalf("ok = %v, want %v (err %v)", ok, c.ok, err)
			}
			if c.errField != "" {
				var ve *ViolationError
				if !errors.As(err, &ve) || ve.Field != c.errField {
					t.Fatalf("err = %v, want a %s field error", err, c.errField)
				}
				if c.errOffset != 0 && ve.Offset != c.errOffset {
					t.Fatalf("offset = %d, want %d", ve.Offset, c.errOffset)
				}
				if !strings.Contains(err.Error(), "byte ") {
					t.Fatalf("error lacks the byte offset: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if c.want != nil && !violationEqual(v, *c.want) {
				t.Fatalf("got %+v\nwant %+v", v, *c.want)
			}
		})
	}
}

func violationEqual(a, b Violation) bool {
	return a.LaunchTag == b.LaunchTag && slices.Equal(a.FailReasons, b.FailReasons) &&
		a.SlotIdx == b.SlotIdx && a.Position == b.Position && a.StoredToken == b.StoredToken &&
		a.ExpectedToken == b.ExpectedToken && a.StoredChainHash == b.StoredChainHash && a.ExpectedAux == b.ExpectedAux
}

func TestViolationFormatMatchesSGLang(t *testing.T) {
	v, ok, err := ParseViolation([]byte(sglangLine))
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	if v.String() != sglangLine {
		t.Fatalf("String() =\n%s\nwant\n%s", v.String(), sglangLine)
	}
	if v.IsWrite() || v.FailReason() != "chain_hash+position+real_kv_hash" {
		t.Fatal("IsWrite/FailReason")
	}
	if (Violation{FailReasons: []string{"write_position"}}).IsWrite() != true || (Violation{}).FailReason() != "none" {
		t.Fatal("write/none")
	}
}

// FuzzParseViolation: never panics; a line that parses re-formats to a line
// that parses to the same violation.
func FuzzParseViolation(f *testing.F) {
	f.Add([]byte(sglangLine))
	f.Add([]byte("x kv_canary violation: launch_tag=T fail_reason=none slot_idx=-1 position=0 stored_token=0 expected_token=0 stored_chain_hash=0x0 expected_aux=0x0"))
	f.Fuzz(func(t *testing.T, line []byte) {
		v, ok, err := ParseViolation(line)
		if !ok {
			if err != nil {
				t.Fatalf("not recognized but err %v", err)
			}
			return
		}
		if err != nil {
			var ve *ViolationError
			if !errors.As(err, &ve) || ve.Offset < 0 || ve.Offset > len(line) {
				t.Fatalf("bad error %#v for %q", err, line)
			}
			return
		}
		again, ok2, err2 := ParseViolation([]byte(v.String()))
		if !ok2 || err2 != nil || !violationEqual(v, again) {
			t.Fatalf("round trip of %q: %+v -> %q -> %+v %v", line, v, v.String(), again, err2)
		}
	})
}
