package hook

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Source role and rank: every codec carries them, old encodings without
// them still decode, and values outside the model are refused everywhere.

func roleEvent() Event {
	return Event{Kind: KindRoomChecksum, TS: 11, Run: "r",
		Src:  Source{Node: "h1", Proc: "sglang", PID: 3, Role: "prefill", Rank: 7},
		Body: &RoomChecksum{Room: 1 << 62, Side: SidePrefill, SeqLen: 64, Pages: 1, Bsum: 5}}
}

func TestSourceRoleRankRoundTrip(t *testing.T) {
	for _, src := range []Source{
		{Node: "h1", Proc: "sglang", PID: 3, Role: "prefill", Rank: 7},
		{Role: "decode"},                // rank 0 with a role
		{Role: "decode", Rank: 1 << 30}, // large rank
		{Node: "n"},                     // no role: no role bytes
	} {
		ev := roleEvent()
		ev.Src = src
		frame, err := AppendFrame(nil, ev)
		if err != nil {
			t.Fatalf("%+v: %v", src, err)
		}
		if got := frame[6]&FlagRole != 0; got != (src.Role != "") {
			t.Errorf("%+v: FlagRole set=%v", src, got)
		}
		back, err := NewFrameDecoder(bytes.NewReader(frame)).Decode()
		if err != nil {
			t.Fatalf("%+v: decode frame: %v", src, err)
		}
		if back.Src != src {
			t.Errorf("frame round trip: got %+v want %+v", back.Src, src)
		}
		line, err := ev.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		// The fast path and the slow path (a member order the fast path
		// gives up on) both read role and rank.
		for _, l := range [][]byte{line, bytes.Replace(line, []byte(`{"v":1,`), []byte(`{"v":1,"zz":0,`), 1)} {
			got, reason, err := DecodeJSONLine(l)
			if err != nil {
				t.Fatalf("%s: %v (%s)", l, err, reason)
			}
			if got.Src != src {
				t.Errorf("JSON round trip of %s: got %+v", l, got.Src)
			}
		}
		if src.Role != "" && !bytes.Contains(line, []byte(`"role":"`+src.Role+`"`)) {
			t.Errorf("JSON line lacks role: %s", line)
		}
		n, err := EventLineLen(ev)
		if err != nil || n != len(line) {
			t.Errorf("EventLineLen = %d, %v; want %d", n, err, len(line))
		}
	}
}

// A frame without FlagRole is byte-identical to one written before role and
// rank existed; an older decoder (one that knows only bits 0-2) refuses a
// frame with role as bad_flags, and this one refuses unknown bit 4.
func TestSourceRoleFlagCompat(t *testing.T) {
	ev := roleEvent()
	ev.Src.Role, ev.Src.Rank = "", 0
	frame, _ := AppendFrame(nil, ev)
	if frame[6] != FlagSrc|FlagRun {
		t.Fatalf("flags %#x, want src|run only", frame[6])
	}
	withRole, _ := AppendFrame(nil, roleEvent())
	if withRole[6]&^(FlagJSON|FlagSrc|FlagRun) != FlagRole {
		t.Fatalf("flags %#x", withRole[6])
	}
	bad := append([]byte(nil), frame...)
	bad[6] |= 1 << 4
	_, err := NewFrameDecoder(bytes.NewReader(bad)).Decode()
	if ReasonOf(err) != ReasonBadFlags {
		t.Fatalf("unknown bit 4: %v (%s), want bad_flags", err, ReasonOf(err))
	}
}

func TestSourceRoleValidation(t *testing.T) {
	cases := []struct {
		src  Source
		want string
	}{
		{Source{Role: "Prefill"}, `src role "Prefill" is not one of prefill|decode`},
		{Source{Role: "decode", Rank: -1}, "src rank -1 is negative"},
		{Source{Rank: 2}, "src rank 2 is set without a role"},
	}
	for _, c := range cases {
		ev := roleEvent()
		ev.Src = c.src
		if err := ev.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want %q", c.src, err, c.want)
		}
		if _, err := AppendFrame(nil, ev); err == nil {
			t.Errorf("AppendFrame accepted %+v", c.src)
		}
		// Decoders refuse it too (bad_value): hand-built frame and line.
		good := roleEvent()
		frame, _ := appendFrameUnchecked(nil, good, false)
		frame = patchFrameRole(t, frame, c.src)
		if _, err := NewFrameDecoder(bytes.NewReader(frame)).Decode(); ReasonOf(err) != ReasonBadValue || !strings.Contains(err.Error(), c.want) {
			t.Errorf("frame with %+v: %v (%s)", c.src, err, ReasonOf(err))
		}
		line := `{"v":1,"kind":"replay","ts_ns":1,"src":{"role":"` + c.src.Role + `","rank":` + strconv.Itoa(int(c.src.Rank)) + `},"body":{"mode":"graph"}}`
		if c.src.Role == "" {
			line = `{"v":1,"kind":"replay","ts_ns":1,"src":{"rank":` + strconv.Itoa(int(c.src.Rank)) + `},"body":{"mode":"graph"}}`
		}
		if _, reason, err := DecodeJSONLine([]byte(line)); reason != ReasonBadValue || !strings.Contains(err.Error(), c.want) {
			t.Errorf("line %s: %v (%s)", line, err, reason)
		}
	}
}

// patchFrameRole rewrites the role group of a frame written with FlagRole.
func patchFrameRole(t *testing.T, frame []byte, src Source) []byte {
	t.Helper()
	// Rebuild: header, src, run as in roleEvent, then the new role group.
	ev := roleEvent()
	var b []byte
	b = append(b, 0, 0, 0, 0, FrameVersion, byte(ev.Kind), FlagSrc|FlagRun|FlagRole)
	b = binary.LittleEndian.AppendUint64(b, uint64(ev.TS))
	b = appendStr(b, ev.Src.Node)
	b = appendStr(b, ev.Src.Proc)
	b = binary.LittleEndian.AppendUint32(b, uint32(ev.Src.PID))
	b = appendStr(b, ev.Run)
	b = appendStr(b, src.Role)
	b = binary.AppendUvarint(b, uint64(uint32(src.Rank)))
	// Body: the original frame's body (after its role group).
	orig := roleEvent()
	noRole := orig
	noRole.Src.Role, noRole.Src.Rank = "", 0
	plain, _ := appendFrameUnchecked(nil, noRole, false)
	head := frameHeaderLen + frameFixedLen + (1 + len(ev.Src.Node)) + (1 + len(ev.Src.Proc)) + 4 + (1 + len(ev.Run))
	b = append(b, plain[head:]...)
	binary.LittleEndian.PutUint32(b, uint32(len(b)-frameHeaderLen))
	return b
}

// The golden file as committed before role and rank existed still decodes,
// to the same events minus the new fields.
func TestGoldenBeforeRoleStillDecodes(t *testing.T) {
	f, err := os.Open("testdata/golden/go_events_before_role.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	want := goldenEvents()
	i := 0
	for ; sc.Scan(); i++ {
		ev, reason, err := DecodeJSONLine(sc.Bytes())
		if err != nil {
			t.Fatalf("line %d: %v (%s)", i+1, err, reason)
		}
		w := want[i]
		w.Src.Role, w.Src.Rank = "", 0
		a, _ := ev.MarshalJSON()
		b, _ := w.MarshalJSON()
		if !bytes.Equal(a, b) {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, a, b)
		}
	}
	if i != len(want) {
		t.Errorf("%d lines, want %d", i, len(want))
	}
}
