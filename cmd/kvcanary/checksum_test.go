package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/spec/kvlayout"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/traces"
)

func TestChecksumCompareFlags(t *testing.T) {
	got := mustParse(t, NewCmdChecksum, "compare", "p.log", "d.log", "--json", "--warmup-max-seqlen", "32", "--limit", "5")
	if got == nil || strings.Join(got.Paths, ",") != "p.log,d.log" || !got.JSON.JSON || got.WarmupMaxSeqLen != 32 || got.Limit != 5 {
		t.Fatalf("options %+v", got)
	}
	got, err := parseCmd(NewCmdChecksum, "compare", "run.kvtrace")
	if err != nil || got.WarmupMaxSeqLen != 16 {
		t.Fatalf("defaults: %v %+v", err, got)
	}
	// Several inputs (hosts, ranks) are one compare.
	if got, err = parseCmd(NewCmdChecksum, "compare", "p0.log", "p1.log", "decode.kvtrace"); err != nil || strings.Join(got.Paths, ",") != "p0.log,p1.log,decode.kvtrace" {
		t.Fatalf("three inputs: %v %+v", err, got)
	}
	for _, args := range [][]string{{"compare"}, {"compare", "a", "--warmup-max-seqlen", "-1"}} {
		wantUsage(t, NewCmdChecksum, args...)
	}
}

func runChecksumCompare(t *testing.T, tty, asJSON bool, paths ...string) (string, string, error) {
	t.Helper()
	ios, _, out, errOut := cmdutil.Test()
	ios.SetTTY(tty, tty)
	err := checksumCompareRun(&ChecksumCompareOptions{IO: ios, JSON: &cmdutil.JSONFlags{JSON: asJSON}, Paths: paths, WarmupMaxSeqLen: 16, Limit: 50})
	return out.String(), errOut.String(), err
}

// seedLogs writes the seeds' 112-room result as a prefill and a decode log,
// with prefixes, decimal and hex digests and a garbage line.
func seedLogs(t *testing.T, mismatchRoom uint64) (string, string) {
	t.Helper()
	var p, d strings.Builder
	fmt.Fprintln(&p, "[2026-03-01 10:00:00 TP0] kvcanary room_checksum side=prefill room=0 seq_len=4 pages=1 bsum=31177 xxh3=0")
	fmt.Fprintln(&d, "[2026-03-01 10:00:00 TP0] kvcanary room_checksum side=decode room=0 seq_len=4 pages=1 bsum=0 xxh3=0")
	fmt.Fprintln(&d, "@@ garbage @@")
	for room := uint64(1); room < 112; room++ {
		b, x := kvlayout.Mix64(room), kvlayout.Mix64(room+1)
		fmt.Fprintf(&p, "I1201 rank=0] kvcanary room_checksum side=prefill room=%d seq_len=%d pages=%d bsum=%d xxh3=%#x\n", 7000+room, 100+room, 2+room/64, b, x)
		if room == mismatchRoom {
			x++
		}
		fmt.Fprintf(&d, "kvcanary room_checksum xxh3=%d bsum=%#x side=decode room=%d seq_len=%d pages=%d\n", x, b, 7000+room, 100+room, 2+room/64)
	}
	dir := t.TempDir()
	pp, dp := filepath.Join(dir, "prefill.log"), filepath.Join(dir, "decode.log")
	if err := os.WriteFile(pp, []byte(p.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dp, []byte(d.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return pp, dp
}

func TestChecksumCompareSeedLogs(t *testing.T) {
	pp, dp := seedLogs(t, 0)
	for _, tty := range []bool{true, false} {
		out, errOut, err := runChecksumCompare(t, tty, false, pp, dp)
		if err != nil {
			t.Fatalf("tty=%v: %v", tty, err)
		}
		if first := strings.SplitN(out, "\n", 2)[0]; first != "111/112 rooms match; 1 warmup (room 0, seq_len 4, decode 0)" {
			t.Errorf("tty=%v headline %q", tty, first)
		}
		if !strings.Contains(out, "warmup") || !strings.Contains(out, "0x00000000000079c9") {
			t.Errorf("tty=%v table:\n%s", tty, out)
		}
		if strings.Contains(out, "\t") || !strings.Contains(out, "0     warmup  4        0x00000000000079c9") {
			t.Errorf("tty=%v: want an aligned table on a TTY and in a pipe alike:\n%s", tty, out)
		}
		if !strings.Contains(errOut, "decode.log: skipped 1 line without a checksum record (line 2)") {
			t.Errorf("stderr %q", errOut)
		}
	}
}

func TestChecksumCompareMismatchJSON(t *testing.T) {
	pp, dp := seedLogs(t, 50)
	out, _, err := runChecksumCompare(t, false, true, pp, dp)
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
		t.Fatalf("err %v, want exit 1", err)
	}
	var rep struct {
		Rooms       int            `json:"rooms"`
		Classes     map[string]int `json:"classes"`
		NonMatching []struct {
			Room    string `json:"room"`
			Class   string `json:"class"`
			SeqLen  int    `json:"seq_len"`
			Prefill struct {
				XXH3 string `json:"xxh3"`
			} `json:"prefill"`
			Decode struct {
				XXH3 string `json:"xxh3"`
			} `json:"decode"`
		} `json:"non_matching"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Rooms != 112 || rep.Classes["match"] != 110 || rep.Classes["mismatch"] != 1 || rep.Classes["warmup"] != 1 ||
		rep.Classes["missing-decode"] != 0 || rep.Classes["missing-prefill"] != 0 || rep.Classes["duplicate"] != 0 {
		t.Fatalf("rooms %d classes %v", rep.Rooms, rep.Classes)
	}
	var mm []string
	for _, r := range rep.NonMatching {
		if r.Class == "mismatch" {
			mm = append(mm, r.Room)
			if r.SeqLen != 150 || r.Prefill.XXH3 == r.Decode.XXH3 {
				t.Errorf("mismatch row %+v", r)
			}
		}
	}
	if strings.Join(mm, ",") != "7050" {
		t.Errorf("mismatching rooms %v", mm)
	}
}

func TestChecksumCompareBadInputs(t *testing.T) {
	pp, _ := seedLogs(t, 0)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	copyP := write("copy.log", mustRead(t, pp))
	link := filepath.Join(dir, "link.log")
	if err := os.Link(pp, link); err != nil {
		t.Fatal(err)
	}
	empty := write("empty.log", "")
	badDigest := write("bad.log", "ok\nkvcanary room_checksum side=decode room=1 seq_len=100 pages=2 bsum=0x12 xxh3=0xnope\n")
	for _, c := range []struct {
		name  string
		paths []string
		want  string
	}{
		{"same path", []string{pp, pp}, "same file"},
		{"same inode", []string{pp, link}, "same file"},
		{"same content", []string{pp, copyP}, "identical content"},
		{"empty", []string{pp, empty}, "empty.log: empty file"},
		{"malformed digest", []string{pp, badDigest}, "bad.log:2: malformed xxh3 digest"},
		{"missing file", []string{pp, filepath.Join(dir, "nope.log")}, "nope.log"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := runChecksumCompare(t, false, false, c.paths...)
			if cmdutil.ExitCode(err) != cmdutil.ExitInput || err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v (exit %d), want exit 3 mentioning %q", err, cmdutil.ExitCode(err), c.want)
			}
		})
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestChecksumCompareBundle(t *testing.T) {
	rcs := []*hook.RoomChecksum{
		{Room: 0, Side: hook.SidePrefill, SeqLen: 4, Pages: 1, Bsum: 31177},
		{Room: 0, Side: hook.SideDecode, SeqLen: 4, Pages: 1},
		{Room: 9, Side: hook.SidePrefill, SeqLen: 150, Pages: 3, Bsum: 1, XXH3: 2, PageSum: []hook.Hex64{1, 2, 3}},
		{Room: 9, Side: hook.SideDecode, SeqLen: 150, Pages: 3, Bsum: 1, XXH3: 5, PageSum: []hook.Hex64{1, 2, 4}},
		{Room: 10, Side: hook.SidePrefill, SeqLen: 300, Pages: 5, Bsum: 7, XXH3: 8},
	}
	var evs []hook.Event
	for _, b := range rcs {
		evs = append(evs, hook.Event{Kind: hook.KindRoomChecksum, Body: b})
	}
	path := writeBundle(t, traces.Manifest{Run: "t"}, evs...)
	out, _, err := runChecksumCompare(t, true, false, path)
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
		t.Fatalf("err %v, want exit 1\n%s", err, out)
	}
	if !strings.HasPrefix(out, "0/3 rooms match; 1 mismatch (room 9, seq_len 150); 1 warmup (room 0, seq_len 4, decode 0); 1 missing-decode (room 10, seq_len 300)\n") {
		t.Errorf("headline:\n%s", out)
	}
	if !strings.Contains(out, "2 (tokens 128-150)") {
		t.Errorf("table lacks the mismatching page:\n%s", out)
	}

	// Cut into the footer's frame: the rooms are all still there, and stderr
	// says the bundle is truncated.
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()-3); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runChecksumCompare(t, false, false, path)
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding || !strings.HasPrefix(out, "0/3 rooms match; 1 mismatch") {
		t.Errorf("truncated bundle: exit %d (%v)\n%s", cmdutil.ExitCode(err), err, out)
	}
	if !strings.Contains(errOut, "warning: "+path+" is truncated (") {
		t.Errorf("truncated bundle: stderr %q lacks the truncation warning", errOut)
	}
}

// twinBundle records a small twin run (checksum instrument only) as a bundle.
func twinBundle(t *testing.T, inject []string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "twin.kvtrace")
	w, err := traces.Create(path, traces.Manifest{Run: "twin"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := sim.DefaultConfig()
	cfg.Inject = inject
	cfg.Instruments = sim.Instruments{Checksum: true}
	wl := sim.DefaultWorkload()
	wl.Judge = outcome.Classifier{}.Outcome
	wl.Sessions, wl.Rounds = 3, 1
	var werr error
	if _, err := sim.Run(context.Background(), cfg, wl, hook.PublishFunc(func(ev hook.Event) {
		if err := w.Write(ev); err != nil && werr == nil {
			werr = err
		}
	})); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil || werr != nil {
		t.Fatalf("write bundle: %v %v", err, werr)
	}
	return path
}

// Acceptance through the CLI: the twin's baseline bundle exits 0 with the
// warmup classified; with transfer-race the compare exits 1 and names pages.
func TestChecksumCompareTwinBundles(t *testing.T) {
	out, _, err := runChecksumCompare(t, false, false, twinBundle(t, nil))
	if err != nil {
		t.Fatalf("baseline: %v\n%s", err, out)
	}
	if !strings.Contains(out, "rooms match; 1 warmup (room 0, seq_len 4, decode 0)") || strings.Contains(out, "mismatch") {
		t.Errorf("baseline:\n%s", out)
	}
	out, _, err = runChecksumCompare(t, false, true, twinBundle(t, []string{sim.FaultTransferRace}))
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
		t.Fatalf("transfer-race: err %v, want exit 1\n%s", err, out)
	}
	var rep checksum.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Classes.Mismatch < 1 || rep.PagesLocated < 1 {
		t.Fatalf("transfer-race: %s", rep.Headline())
	}
	for _, rr := range rep.NonMatching {
		if rr.Class == checksum.ClassMismatch && len(rr.MismatchPages) == 0 {
			t.Errorf("room %d: no mismatching pages named", rr.Room)
		}
	}
}

// hostBundle writes room.checksum events as a bundle recorded on node.
func hostBundle(t *testing.T, dir, name, node string, rcs []*hook.RoomChecksum) string {
	t.Helper()
	evs := make([]hook.Event, len(rcs))
	for i, rc := range rcs {
		evs[i] = hook.Event{Kind: hook.KindRoomChecksum, Src: hook.Source{Node: node, Proc: "sglang"}, Body: rc}
	}
	return writeBundleAt(t, filepath.Join(dir, name), traces.Manifest{Run: name}, evs...)
}

// TestChecksumCompareTwoHostBundles: the prefill host's bundle and the
// decode host's, two TP ranks each, multi-layer digests as the GPU hook
// sends them (xxh3 0, page_bsum). On the decode host, rank 1's copy of room
// 9 has one byte flipped on layer 2 in page-table entry 1 between landing
// and admission. Compare exits 1 and names the record, layer, page and
// tokens, in text and JSON; the prefill ranks may also come as per-rank logs.
func TestChecksumCompareTwoHostBundles(t *testing.T) {
	l, _ := kvlayout.NewLayout("fp8")
	srcPages, dstPages := []uint32{3, 0, 2}, []uint32{1, 4, 0}
	const seqLen = 150
	var pre, dec, bad []kvlayout.LayerArena
	for _, id := range []int{0, 1, 2} {
		a := kvlayout.GenArena(l, 40+uint64(id), 4)
		pre = append(pre, kvlayout.LayerArena{Layer: id, Arena: a})
		d := make([]byte, 5*l.PageBytes())
		for i := range srcPages {
			copy(d[int(dstPages[i])*l.PageBytes():][:l.PageBytes()], a[int(srcPages[i])*l.PageBytes():][:l.PageBytes()])
		}
		dec = append(dec, kvlayout.LayerArena{Layer: id, Arena: d})
		bad = append(bad, kvlayout.LayerArena{Layer: id, Arena: slices.Clone(d)})
	}
	bad[2].Arena[int(dstPages[1])*l.PageBytes()+3*128] ^= 1 // token 67, layer 2
	ev := func(layers []kvlayout.LayerArena, pages []uint32, room uint64, side hook.Side, rank int, stage string) *hook.RoomChecksum {
		rc := checksum.NewLayersRoomEvent(l, layers, pages, seqLen, room, side)
		rc.Rank, rc.Stage, rc.XXH3 = rank, stage, 0
		return rc
	}
	var prcs, drcs []*hook.RoomChecksum
	for _, room := range []uint64{7, 8, 9} {
		for rank := range 2 {
			prcs = append(prcs, ev(pre, srcPages, room, hook.SidePrefill, rank, hook.StageSent))
			drcs = append(drcs, ev(dec, dstPages, room, hook.SideDecode, rank, hook.StageTransferred))
			admitted := dec
			if room == 9 && rank == 1 {
				admitted = bad
			}
			drcs = append(drcs, ev(admitted, dstPages, room, hook.SideDecode, rank, hook.StageAdmitted))
		}
	}
	dir := t.TempDir()
	pb := hostBundle(t, dir, "prefill-host.kvtrace", "prefill-host", prcs)
	db := hostBundle(t, dir, "decode-host.kvtrace", "decode-host", drcs)

	out, errOut, err := runChecksumCompare(t, true, false, pb, db)
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
		t.Fatalf("err %v, want exit 1\n%s%s", err, out, errOut)
	}
	if !strings.HasPrefix(out, "2/3 rooms match; 1 mismatch (room 9, seq_len 150)\n") {
		t.Errorf("headline:\n%s", out)
	}
	wantContains(t, "text", out, "1 (tokens 64-128) on layer 2", "decode rank 1 admitted @decode-host: bsum differs",
		"(vs prefill rank 0 sent @prefill-host)", "changed on the decode host after landing")
	if strings.Contains(out, "\t") {
		t.Errorf("TTY output is not an aligned table:\n%s", out)
	}

	out, _, err = runChecksumCompare(t, false, true, db, pb) // order does not matter
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
		t.Fatalf("json: err %v", err)
	}
	var rep checksum.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Rooms != 3 || rep.Classes.Mismatch != 1 || rep.PagesLocated != 1 || len(rep.Inputs) != 2 {
		t.Fatalf("%s", rep.Headline())
	}
	rr := rep.NonMatching[0]
	if !slices.Equal(rr.MismatchLayers, []int{2}) || !slices.Equal(rr.MismatchPages, []int{1}) || len(rr.Records) != 6 {
		t.Fatalf("room %+v", rr)
	}
	var disagree []checksum.RecordID
	for _, r := range rr.Records {
		if !r.Agrees {
			disagree = append(disagree, r.RecordID)
			if r.PagesFrom != "page_bsum" || !slices.Equal(r.MismatchTokens, []checksum.TokenRange{{Lo: 64, Hi: 128}}) {
				t.Errorf("record %+v", r)
			}
		}
	}
	if want := []checksum.RecordID{{Side: hook.SideDecode, Rank: 1, Stage: hook.StageAdmitted, Node: "decode-host"}}; !slices.Equal(disagree, want) {
		t.Errorf("disagreeing %v, want %v", disagree, want)
	}

	// The prefill ranks as one log per rank, mixed with the decode bundle.
	var logs []string
	for rank := range 2 {
		var b []byte
		for _, rc := range prcs {
			if rc.Rank != rank {
				continue
			}
			rec, err := checksum.RecordFromEvent(rc)
			if err != nil {
				t.Fatal(err)
			}
			b = checksum.AppendLogLine(append(b, fmt.Sprintf("[TP%d] ", rank)...), &rec)
			b = append(b, '\n')
		}
		p := filepath.Join(dir, fmt.Sprintf("prefill-tp%d.log", rank))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		logs = append(logs, p)
	}
	out, _, err = runChecksumCompare(t, false, false, logs[0], logs[1], db)
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding || !strings.HasPrefix(out, "2/3 rooms match; 1 mismatch (room 9, seq_len 150)") ||
		!strings.Contains(out, "(vs prefill rank 0 sent)") || !strings.Contains(out, "on layer 2") {
		t.Errorf("logs + bundle: %v\n%s", err, out)
	}
}

// A file given twice among several inputs is refused, whichever positions.
func TestChecksumCompareRepeatedInputAmongSeveral(t *testing.T) {
	pp, dp := seedLogs(t, 0)
	copyD := filepath.Join(t.TempDir(), "decode-copy.log")
	if err := os.WriteFile(copyD, []byte(mustRead(t, dp)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		paths []string
		want  string
	}{
		{[]string{dp, pp, dp}, "is given twice (the same file)"},
		{[]string{dp, pp, copyD}, "have identical content"},
	} {
		_, _, err := runChecksumCompare(t, false, false, c.paths...)
		if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("%v: %v (exit %d), want exit 3 ~%q", c.paths, err, cmdutil.ExitCode(err), c.want)
		}
	}
}

// Rooms seen on one side only are unmeasured, not dirty: with the decode
// producer reporting it skipped checksums, the comparison is partial — a
// PARTIAL line names the one-sided rooms and the producer's note (text and
// --json) — and it exits 4, not 1. A mismatch still exits 1.
func TestChecksumComparePartial(t *testing.T) {
	evs := []hook.Event{pdEvent(1, hook.SidePrefill, false), pdEvent(1, hook.SideDecode, false), pdEvent(2, hook.SidePrefill, false),
		{Kind: hook.KindRunEnd, Src: hook.Source{Proc: "python3", PID: 7, Role: "decode", Rank: 1},
			Body: &hook.RunEnd{Error: "1 room checksums skipped (index-K on the host)"}}}
	path := writeBundle(t, traces.Manifest{Run: "t"}, evs...)
	out, _, err := runChecksumCompare(t, false, false, path)
	if code := cmdutil.ExitCode(err); code != cmdutil.ExitNoData {
		t.Fatalf("exit %d (%v), want 4\n%s", code, err, out)
	}
	if !strings.Contains(out, "\nPARTIAL:") || !strings.Contains(out, "1 room seen on one side only (1 missing-decode") ||
		!strings.Contains(out, "python3 pid 7 (decode rank 1): 1 room checksums skipped") {
		t.Fatalf("partial lines:\n%s", out)
	}
	js, _, _ := runChecksumCompare(t, false, true, path)
	var rep ChecksumCompareReport
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Report == nil || rep.Rooms != 2 || rep.Status != StatusPartial || len(rep.Partial) != 2 || rep.Coverage == nil || rep.Coverage.Lossy != 1 {
		t.Fatalf("json:\n%s", js)
	}
	// The producer's note alone (every room compared) is partial too.
	path = writeBundle(t, traces.Manifest{Run: "t"}, append(evs[:2:2], evs[3])...)
	if out, _, err := runChecksumCompare(t, false, false, path); cmdutil.ExitCode(err) != cmdutil.ExitNoData || !strings.Contains(out, "checksums skipped") {
		t.Fatalf("exit %v:\n%s", err, out)
	}
	// A mismatch beside it is a finding.
	path = writeBundle(t, traces.Manifest{Run: "t"}, append([]hook.Event{pdEvent(3, hook.SidePrefill, false), pdEvent(3, hook.SideDecode, true)}, evs...)...)
	if _, _, err := runChecksumCompare(t, false, false, path); cmdutil.ExitCode(err) != cmdutil.ExitFinding {
		t.Fatalf("exit %v, want 1", err)
	}
}
