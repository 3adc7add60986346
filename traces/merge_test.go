package traces

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// hostBundle writes a bundle of replay events stamped ts (in order given),
// from host, its manifest created at created.
func hostBundle(t testing.TB, dir, host string, created time.Time, ts []int64) string {
	t.Helper()
	p := filepath.Join(dir, host+".kvtrace")
	w, err := Create(p, Manifest{Host: hook.HostInfo{Hostname: host}, Run: "run-" + host, Created: created})
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range ts {
		ev := hook.Event{Kind: hook.KindReplay, TS: x, Src: hook.Source{Node: host, Role: "decode", Rank: int32(i % 2)},
			Body: &hook.Replay{Step: uint64(i), Mode: hook.ModeGraph}}
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	w.SetDropped(uint64(len(host)))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func openAll(t testing.TB, paths ...string) []*Reader {
	t.Helper()
	var rs []*Reader
	for _, p := range paths {
		r, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		rs = append(rs, r)
	}
	return rs
}

func runMerge(t testing.TB, out string, opts MergeOptions, paths ...string) MergeReport {
	t.Helper()
	rs := openAll(t, paths...)
	plan := PlanMerge(rs, opts)
	w, err := Create(out, MergeManifest(plan, opts, InputManifests(rs)))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Merge(context.Background(), rs, plan, w, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return rep
}

func readMerged(t testing.TB, p string) (*Reader, []hook.Event) {
	t.Helper()
	r, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	var evs []hook.Event
	eachEvent(t, r, func(ev hook.Event) { evs = append(evs, ev) })
	return r, evs
}

func TestMergeTwoHostsIntoOneTimeline(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	base := t0.UnixNano()
	// Host a: even steps; host b: odd ones, with local disorder (arrival
	// order) inside the reorder window.
	var ta, tb []int64
	for i := 0; i < 500; i++ {
		ta = append(ta, base+int64(2*i)*1000)
	}
	for i := 0; i < 500; i++ {
		j := i ^ 1 // swap neighbours
		tb = append(tb, base+int64(2*j+1)*1000)
	}
	a := hostBundle(t, dir, "prefill-host", t0, ta)
	b := hostBundle(t, dir, "decode-host", t0.Add(1500*time.Millisecond), tb)
	out := filepath.Join(dir, "all.kvtrace")
	rep := runMerge(t, out, MergeOptions{Window: 8}, a, b)

	if rep.Events != 1000 || rep.OutOfOrder != 0 || rep.Aligned {
		t.Fatalf("report %+v", rep)
	}
	if rep.Inputs[1].OffsetNS != int64(1500*time.Millisecond) || rep.Inputs[1].AppliedNS != 0 || rep.Inputs[0].OffsetNS != 0 {
		t.Errorf("offsets %+v: want b estimated +1.5s, not applied", rep.Inputs)
	}
	r, evs := readMerged(t, out)
	if len(evs) != 1000 {
		t.Fatalf("%d events", len(evs))
	}
	for i, ev := range evs {
		if ev.TS != base+int64(i)*1000 {
			t.Fatalf("event %d ts %d, want %d (timeline out of order)", i, ev.TS-base, int64(i)*1000)
		}
		want := "prefill-host"
		if i%2 == 1 {
			want = "decode-host"
		}
		if ev.Src.Node != want || ev.Src.Role != "decode" {
			t.Fatalf("event %d src %+v, want node %s", i, ev.Src, want)
		}
	}
	m := r.Manifest()
	if m.Command != "trace merge" || m.Run != "run-prefill-host+run-decode-host" || m.Labels[LabelMergeInputs] != "2" ||
		m.Labels["merge.1.offset_ns"] != "1500000000" || m.Labels["merge.1.applied_ns"] != "0" || m.Labels["merge.1.host"] != "decode-host" {
		t.Errorf("merged manifest %+v", m)
	}
	f, ok := r.Footer()
	if !ok || f.Dropped != uint64(len("prefill-host")+len("decode-host")) {
		t.Errorf("footer %+v: want the inputs' drops carried over", f)
	}
}

// With Align the estimated offset is subtracted: b's clock, 2 s ahead by
// its manifest, is mapped onto a's.
func TestMergeAlignAppliesAndRecordsOffsets(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	base := t0.UnixNano()
	a := hostBundle(t, dir, "a", t0, []int64{base + 10, base + 30})
	b := hostBundle(t, dir, "b", t0.Add(2*time.Second), []int64{base + int64(2*time.Second) + 20})
	out := filepath.Join(dir, "all.kvtrace")
	rep := runMerge(t, out, MergeOptions{Align: true}, a, b)
	if !rep.Aligned || rep.Inputs[1].AppliedNS != int64(2*time.Second) {
		t.Fatalf("report %+v", rep)
	}
	r, evs := readMerged(t, out)
	var got []string
	for _, ev := range evs {
		got = append(got, ev.Src.Node+"@"+strconv.FormatInt(ev.TS-base, 10))
	}
	if strings.Join(got, " ") != "a@10 b@20 a@30" {
		t.Errorf("aligned timeline %v", got)
	}
	if r.Manifest().Labels[LabelMergeAlign] != "true" || r.Manifest().Labels["merge.1.applied_ns"] != "2000000000" {
		t.Errorf("labels %v", r.Manifest().Labels)
	}
}

// An event further out of place than the window comes out late: counted,
// never lost.
func TestMergeCountsOutOfOrderBeyondWindow(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Unix(1000, 0)
	a := hostBundle(t, dir, "a", t0, []int64{5, 6, 7, 8, 1})
	out := filepath.Join(dir, "m.kvtrace")
	rep := runMerge(t, out, MergeOptions{Window: 2}, a)
	if rep.Events != 5 || rep.OutOfOrder == 0 || rep.MaxLatenessNS <= 0 {
		t.Fatalf("report %+v: want the late event counted", rep)
	}
	if _, evs := readMerged(t, out); len(evs) != 5 {
		t.Fatalf("%d events, want 5", len(evs))
	}
}

// A truncated input is merged as far as it goes and reported.
func TestMergeTruncatedInput(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Unix(2000, 0)
	var ts []int64
	for i := 0; i < 20000; i++ {
		ts = append(ts, int64(i))
	}
	a := hostBundle(t, dir, "a", t0, ts)
	b := hostBundle(t, dir, "b", t0, []int64{3, 4})
	raw, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a, raw[:len(raw)*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "m.kvtrace")
	rep := runMerge(t, out, MergeOptions{}, a, b)
	if !rep.Inputs[0].Truncated || rep.Inputs[0].TruncationReason == "" || rep.Inputs[1].Truncated {
		t.Fatalf("inputs %+v: want a reported truncated", rep.Inputs)
	}
	if rep.Inputs[0].Events == 0 || rep.Inputs[0].Events >= 20000 || rep.Events != rep.Inputs[0].Events+2 {
		t.Fatalf("report %+v", rep)
	}
	if _, evs := readMerged(t, out); uint64(len(evs)) != rep.Events {
		t.Fatalf("%d events in the merged bundle, report says %d", len(evs), rep.Events)
	}
}

func TestRetimeLine(t *testing.T) {
	ev := hook.Event{Kind: hook.KindReplay, TS: -5, Body: &hook.Replay{Mode: hook.ModeGraph}}
	line, _ := ev.MarshalJSON()
	got, err := retimeLine(nil, line, 1234)
	if err != nil {
		t.Fatal(err)
	}
	back, _, err := hook.DecodeJSONLine(got)
	if err != nil || back.TS != 1234 {
		t.Fatalf("%s: %v %d", got, err, back.TS)
	}
	// A line in another member order goes through the decoder.
	odd := []byte(`{"kind":"replay","v":1,"body":{"mode":"graph"},"ts_ns":7}`)
	got, err = retimeLine(nil, odd, 99)
	if err != nil {
		t.Fatal(err)
	}
	if back, _, err = hook.DecodeJSONLine(got); err != nil || back.TS != 99 {
		t.Fatalf("%s: %v", got, err)
	}
}

// rawBundle writes a bundle of the given lines (the first is the manifest
// line), without a footer unless the lines hold one.
func rawBundle(t testing.TB, dir, name string, lines ...string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, compress(t, lines...), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A line that fails re-timing under --align is skipped and counted, and the
// rest of its input is still merged, even with a window of one line.
func TestMergeRetimeFailureKeepsTheRestOfTheInput(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := hostBundle(t, dir, "a", t0, []int64{100, 101, 102})
	// b's first line passes the reader's envelope check but not the
	// decoder (an outcome outside the vocabulary), so it cannot be re-timed.
	w, err := Create(filepath.Join(dir, "b.kvtrace"), Manifest{Created: t0.Add(time.Second), Run: "b"})
	if err != nil {
		t.Fatal(err)
	}
	lines := []string{`{"kind":"session","v":1,"ts_ns":5,"body":{"outcome":"lek"}}`}
	for i := 0; i < 5; i++ {
		lines = append(lines, `{"v":1,"kind":"run.end","ts_ns":`+strconv.Itoa(200+i)+`,"body":{"wall_ns":1}}`)
	}
	for _, l := range lines {
		k, ts, err := hook.PeekJSONLine([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteLine(k, ts, []byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "m.kvtrace")
	rep := runMerge(t, out, MergeOptions{Align: true, Window: 1}, a, filepath.Join(dir, "b.kvtrace"))
	if rep.Events != 8 || rep.Inputs[1].Skipped != 1 || rep.Inputs[1].Events != 6 {
		t.Fatalf("report: %d events, input b %+v; want 8 events (3 + 5), b skipped 1 of 6", rep.Events, rep.Inputs[1])
	}
	if _, evs := readMerged(t, out); len(evs) != 8 {
		t.Fatalf("%d events in the merged bundle, want 8", len(evs))
	}
}

// The merged bundle carries its inputs' damage: per-input footer labels
// (footer present/absent, truncated, skipped), and its dropped count is
// marked a lower bound when an input has no footer (its drops are unknown).
func TestMergeRecordsInputDamageAndUnknownDrops(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := hostBundle(t, dir, "a", t0, []int64{1, 2, 3})
	b := rawBundle(t, dir, "b.kvtrace",
		`{"kvtrace":{"format_version":"1.0","tool":"t","created":"2026-01-01T00:00:01Z","run":"b"}}`,
		`{"v":1,"kind":"run.end","ts_ns":4,"body":{"wall_ns":1}}`,
		`not json`)
	out := filepath.Join(dir, "m.kvtrace")
	rep := runMerge(t, out, MergeOptions{}, a, b)
	if !rep.DroppedUnknown || rep.Inputs[1].HasFooter || !rep.Inputs[0].HasFooter {
		t.Errorf("report: dropped_unknown %v, inputs %+v; want drops unknown, b without footer", rep.DroppedUnknown, rep.Inputs)
	}
	r, _ := readMerged(t, out)
	f, ok := r.Footer()
	if !ok {
		t.Fatal("merged bundle has no footer")
	}
	if !f.DroppedUnknown || f.Dropped != uint64(len("a")) {
		t.Errorf("footer dropped %d unknown %v; want a's drops as a lower bound", f.Dropped, f.DroppedUnknown)
	}
	want := map[string]string{"merge.0.footer": "present", "merge.0.truncated": "false", "merge.0.skipped": "0",
		"merge.1.footer": "absent", "merge.1.truncated": "true", "merge.1.skipped": "1"}
	for k, v := range want {
		if f.Labels[k] != v {
			t.Errorf("footer label %s = %q, want %q (labels %v)", k, f.Labels[k], v, f.Labels)
		}
	}
	// A merge of complete inputs knows its drops.
	out2 := filepath.Join(dir, "m2.kvtrace")
	if rep := runMerge(t, out2, MergeOptions{}, a); rep.DroppedUnknown {
		t.Error("complete input: drops reported unknown")
	}
	if r, _ := readMerged(t, out2); func() bool { f, _ := r.Footer(); return f.DroppedUnknown }() {
		t.Error("complete input: footer marks drops unknown")
	}
}

// Settings that differ between inputs are not presented as the run's: the
// merged manifest keeps only the fields every input agrees on, names the
// others, and keeps each input's own configuration in its labels.
func TestMergeManifestKeepsOnlyAgreedSettings(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	graphs := true
	mk := func(name, host string, seed uint64) string {
		p := filepath.Join(dir, name)
		w, err := Create(p, Manifest{Created: t0, Host: hook.HostInfo{Hostname: host, OS: "linux"},
			Config: hook.RunConfig{Model: "m", Seed: seed, CUDAGraph: &graphs}})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := mk("a.kvtrace", "ha", 1), mk("b.kvtrace", "hb", 2)
	out := filepath.Join(dir, "m.kvtrace")
	rep := runMerge(t, out, MergeOptions{}, a, b)
	m := readManifest(t, out)
	if m.Config.Model != "m" || m.Config.CUDAGraph == nil || !*m.Config.CUDAGraph || m.Config.Seed != 0 {
		t.Errorf("merged config %+v: want model and cuda_graph kept, seed left unset", m.Config)
	}
	if m.Host.Hostname != "" || m.Host.OS != "linux" {
		t.Errorf("merged host %+v: want hostname unset, os kept", m.Host)
	}
	if d := m.Labels[LabelMergeDiffers]; d != "seed,host.hostname" || strings.Join(rep.ConfigDiffers, ",") != d {
		t.Errorf("differs label %q, report %v; want seed,host.hostname", d, rep.ConfigDiffers)
	}
	if !strings.Contains(m.Labels["merge.1.config"], `"seed":2`) || !strings.Contains(m.Labels["merge.0.host_info"], `"hostname":"ha"`) {
		t.Errorf("per-input labels %v", m.Labels)
	}
	// Inputs that agree: the configuration is theirs, no extra labels.
	out2 := filepath.Join(dir, "m2.kvtrace")
	runMerge(t, out2, MergeOptions{}, a, a)
	if m := readManifest(t, out2); m.Config.Seed != 1 || m.Host.Hostname != "ha" || m.Labels[LabelMergeDiffers] != "" || m.Labels["merge.0.config"] != "" {
		t.Errorf("agreeing inputs: manifest %+v", m)
	}
}

func readManifest(t testing.TB, p string) Manifest {
	t.Helper()
	r, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	return r.Manifest()
}

// A manifest without a start time leaves the clock offset unknown: the
// labels say so, and Align refuses that input instead of applying 0.
func TestMergeUnknownOffset(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := hostBundle(t, dir, "a", t0, []int64{1})
	b := rawBundle(t, dir, "b.kvtrace", `{"kvtrace":{"format_version":"1.0","tool":"t","run":"b"}}`,
		`{"v":1,"kind":"run.end","ts_ns":4,"body":{"wall_ns":1}}`)
	rs := openAll(t, a, b)
	plan := PlanMerge(rs, MergeOptions{})
	if !plan[0].OffsetKnown || plan[1].OffsetKnown {
		t.Fatalf("plan %+v: want a's offset known, b's unknown", plan)
	}
	if m := MergeManifest(plan, MergeOptions{}, InputManifests(rs)); m.Labels["merge.1.offset_ns"] != "unknown" {
		t.Errorf("offset label %q, want unknown", m.Labels["merge.1.offset_ns"])
	}
	opts := MergeOptions{Align: true}
	plan = PlanMerge(rs, opts)
	err := CheckAlign(plan, opts)
	if !errors.Is(err, ErrOffsetUnknown) || !strings.Contains(err.Error(), "b.kvtrace") || strings.Contains(err.Error(), "a.kvtrace") {
		t.Errorf("CheckAlign: %v; want ErrOffsetUnknown naming b only", err)
	}
	w, err := Create(filepath.Join(dir, "m.kvtrace"), Manifest{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := Merge(context.Background(), rs, plan, w, opts); !errors.Is(err, ErrOffsetUnknown) {
		t.Errorf("Merge with Align: %v, want ErrOffsetUnknown", err)
	}
}
