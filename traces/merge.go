package traces

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Merging bundles from several hosts into one timeline (trace merge).
//
// The merge streams: each input is read frame by frame, and at most
// MergeOptions.Window event lines per input wait in a min-heap keyed by
// (ts_ns, input, order), so memory is bounded by inputs × Window lines
// however large the bundles are. A bundle is ordered by arrival, not
// strictly by ts_ns (several producers feed one collector); an event more
// than Window lines out of place comes out late and is counted
// (MergeReport.OutOfOrder), never dropped.
//
// Clocks. Each host stamps its events with its own clock. The only
// cross-host evidence a bundle holds is its manifest's creation time, so
// the merge estimates each input's clock offset against the first input as
// the difference of the manifests' start times — exact only if the
// recordings were started together. The estimate is always reported (in
// MergeReport and in the merged manifest's labels) and applied only with
// MergeOptions.Align; without it, events keep their own timestamps (hosts
// synchronised by NTP/PTP are usually closer than any start-time estimate).

// MergeOptions configure Merge.
type MergeOptions struct {
	// Align shifts every input's timestamps by its estimated clock offset
	// (ts - offset), mapping it onto the first input's clock.
	Align bool
	// Window is the number of event lines each input keeps ahead for
	// reordering (default DefaultMergeWindow).
	Window int
	// Tool names the writing tool in the merged manifest.
	Tool string
}

// DefaultMergeWindow is MergeOptions.Window by default.
const DefaultMergeWindow = 4096

// MergeInput is what the merge learned about one input.
type MergeInput struct {
	Name    string    `json:"name"`
	Host    string    `json:"host,omitempty"`
	Run     string    `json:"run,omitempty"`
	Created time.Time `json:"created"`
	// OffsetNS is the estimated clock offset against the first input:
	// this manifest's start time less the first one's. Meaningful only
	// when OffsetKnown: a manifest without a start time (damaged, or
	// written without one), here or in the first input, leaves it unknown,
	// and Align refuses such an input.
	OffsetNS    int64 `json:"offset_ns"`
	OffsetKnown bool  `json:"offset_known"`
	// AppliedNS is what was subtracted from this input's timestamps (0
	// unless MergeOptions.Align).
	AppliedNS        int64  `json:"applied_ns"`
	Events           uint64 `json:"events"`
	FirstTS          int64  `json:"first_ts_ns"`
	LastTS           int64  `json:"last_ts_ns"`
	Skipped          uint64 `json:"skipped"`
	Truncated        bool   `json:"truncated"`
	TruncationReason string `json:"truncation_reason,omitempty"`
	ManifestDamage   string `json:"manifest_damage,omitempty"`
	// HasFooter: the input ended with a footer. Without one its drops and
	// refusals are unknown (Dropped and Rejected are then 0, not counts).
	HasFooter bool   `json:"has_footer"`
	Dropped   uint64 `json:"dropped"`  // from its footer
	Rejected  uint64 `json:"rejected"` // from its footer
}

// MergeReport is the outcome of Merge.
type MergeReport struct {
	Inputs  []MergeInput `json:"inputs"`
	Aligned bool         `json:"aligned"`
	Events  uint64       `json:"events"`
	// OutOfOrder counts events written after a later-stamped one (more
	// than Window lines out of place in their input); MaxLatenessNS is the
	// largest such gap.
	OutOfOrder    uint64 `json:"out_of_order"`
	MaxLatenessNS int64  `json:"max_lateness_ns"`
	// BytesIn is the decoded JSON bytes read from all inputs.
	BytesIn uint64 `json:"bytes_in"`
	// DroppedUnknown: some input has no footer, so the merged footer's
	// dropped count is a lower bound (Footer.DroppedUnknown).
	DroppedUnknown bool `json:"dropped_unknown"`
	// ConfigDiffers names the run configuration and host fields (JSON
	// names, "host." prefixed for the host) whose values differ between
	// the inputs or are unknown in one: the merged manifest leaves them
	// unset, and each input's own configuration is in its labels.
	ConfigDiffers []string `json:"config_differs,omitempty"`
	// Producers counts, per producer process (src.node, src.pid), the
	// events the inputs hold (run.end aside) and the sent count its run.end
	// reported (0: not known; WIRE.md, "run.end's sent"), for the first
	// MaxMergeProducers producers. Held below sent: events lost in transit.
	Producers []MergeProducer `json:"producers,omitempty"`
	// Uncounted is the events of producers beyond MaxMergeProducers.
	Uncounted uint64 `json:"uncounted_events,omitempty"`
}

// MaxMergeProducers bounds the producers a MergeReport counts.
const MaxMergeProducers = 4096

// MergeProducer is one producer process's events in the merge's inputs.
type MergeProducer struct {
	Src  hook.Source `json:"src"`
	Sent uint64      `json:"sent,omitempty"` // its run.end's sent; 0: not known
	Held uint64      `json:"held"`           // its events the inputs hold, run.end aside
}

// producerCounts tallies MergeReport.Producers.
type producerCounts struct {
	at    map[[2]string]int // by (src.node, src.pid)
	byRaw map[string]int    // by a canonical line's src bytes: -1 past MaxMergeProducers
	rep   *MergeReport
}

// count takes one input line. Only a run.end line's body is decoded; other
// lines are read up to their src, and a canonical line's src bytes seen
// before are not decoded again.
func (pc *producerCounts) count(kind hook.Kind, line []byte) {
	raw, canonical := canonicalSrc(line)
	i, ok := -1, false
	if canonical {
		i, ok = pc.byRaw[string(raw)] // no allocation for the lookup
	}
	if !ok {
		var src hook.Source
		if canonical {
			if len(raw) > 0 && json.Unmarshal(raw, &src) != nil {
				src = hook.Source{}
			}
		} else {
			src = lineSrc(line)
		}
		i = pc.index(src)
		if canonical && len(pc.byRaw) < 4*MaxMergeProducers {
			pc.byRaw[string(raw)] = i
		}
	}
	if i < 0 {
		pc.rep.Uncounted++
		return
	}
	p := &pc.rep.Producers[i]
	if kind != hook.KindRunEnd {
		p.Held++
		return
	}
	if ev, _, err := hook.DecodeJSONLine(line); err == nil {
		if b, ok := ev.Body.(*hook.RunEnd); ok && b != nil {
			p.Sent = max(p.Sent, b.Sent)
		}
	}
}

// index is src's producer, -1 past MaxMergeProducers.
func (pc *producerCounts) index(src hook.Source) int {
	k := [2]string{src.Node, strconv.FormatInt(int64(src.PID), 10)}
	i, ok := pc.at[k]
	if !ok {
		if len(pc.rep.Producers) >= MaxMergeProducers {
			return -1
		}
		i = len(pc.rep.Producers)
		pc.at[k] = i
		pc.rep.Producers = append(pc.rep.Producers, MergeProducer{Src: src})
	}
	return i
}

// canonicalSrc finds the src object of a line in the member order every
// writer uses ({"v":1,"kind":"K","ts_ns":N,"src":{…},…): nil when the line
// has none. ok is false for another line.
func canonicalSrc(line []byte) (raw []byte, ok bool) {
	const head = `{"v":1,"kind":"`
	if !bytes.HasPrefix(line, []byte(head)) {
		return nil, false
	}
	rest := line[len(head):]
	q := bytes.IndexByte(rest, '"')
	if q < 0 || !bytes.HasPrefix(rest[q:], []byte(`","ts_ns":`)) {
		return nil, false
	}
	rest = rest[q+len(`","ts_ns":`):]
	i := 0
	for i < len(rest) && (rest[i] == '-' || rest[i] >= '0' && rest[i] <= '9') {
		i++
	}
	rest = rest[i:]
	if !bytes.HasPrefix(rest, []byte(`,"src":{`)) {
		return nil, len(rest) > 0 && rest[0] == ','
	}
	obj := rest[len(`,"src":`):]
	// Fast: the first '}' closes src when no quote is open before it and
	// nothing is escaped.
	if j := bytes.IndexByte(obj, '}'); j > 0 {
		c := obj[:j+1]
		if bytes.Count(c, []byte{'"'})%2 == 0 && bytes.IndexByte(c, '\\') < 0 && bytes.IndexByte(c[1:], '{') < 0 {
			return c, true
		}
	}
	in := false
	for j := 1; j < len(obj); j++ {
		switch c := obj[j]; {
		case in && c == '\\':
			j++
		case c == '"':
			in = !in
		case !in && c == '{':
			return nil, false // src holds no objects: not a line this reads
		case !in && c == '}':
			return obj[:j+1], true
		}
	}
	return nil, false
}

// lineSrc reads an event line's src, stopping there (writers put it before
// the body). A line without one, or one it cannot read, is the empty
// producer's.
func lineSrc(line []byte) hook.Source {
	d := json.NewDecoder(bytes.NewReader(line))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return hook.Source{}
	}
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return hook.Source{}
		}
		if t == "src" {
			var src hook.Source
			if d.Decode(&src) != nil {
				return hook.Source{}
			}
			return src
		}
		var skip json.RawMessage
		if d.Decode(&skip) != nil {
			return hook.Source{}
		}
	}
	return hook.Source{}
}

// ErrOffsetUnknown: Align was asked for an input whose clock offset is
// unknown (its manifest, or the first input's, has no start time).
var ErrOffsetUnknown = errors.New("clock offset unknown")

// Manifest labels of a merged bundle (N is the input's index).
const (
	LabelMergeInputs = "merge.inputs"  // number of inputs
	LabelMergeAlign  = "merge.aligned" // "true" when offsets were applied
	labelMergeFmt    = "merge.%d.%s"   // name, host, run, created, offset_ns, applied_ns, config, host_info; footer: truncated, skipped, footer
	// LabelMergeDiffers (manifest) lists the config and host fields that
	// differ between inputs (or are unknown in one), comma separated.
	LabelMergeDiffers = "merge.config_differs"
	// LabelUnknown is the value of a label whose quantity is unknown.
	LabelUnknown    = "unknown"
	mergeWriteError = "write merged bundle"
)

// PlanMerge estimates the clock offsets of inputs (see MergeReport) from
// their manifests, before any event is read.
func PlanMerge(inputs []*Reader, opts MergeOptions) []MergeInput {
	out := make([]MergeInput, len(inputs))
	var ref time.Time
	for i, r := range inputs {
		m := r.Manifest()
		in := MergeInput{Name: r.Name(), Host: m.Host.Hostname, Run: m.Run, Created: m.Created, ManifestDamage: r.ManifestDamage()}
		if i == 0 {
			ref = m.Created
		}
		if !m.Created.IsZero() && !ref.IsZero() {
			in.OffsetNS = m.Created.Sub(ref).Nanoseconds()
			in.OffsetKnown = true
		}
		if opts.Align && in.OffsetKnown {
			in.AppliedNS = in.OffsetNS
		}
		out[i] = in
	}
	return out
}

// InputManifests returns the inputs' manifests, for MergeManifest.
func InputManifests(inputs []*Reader) []Manifest {
	ms := make([]Manifest, len(inputs))
	for i, r := range inputs {
		ms[i] = r.Manifest()
	}
	return ms
}

// CheckAlign returns an error wrapping ErrOffsetUnknown naming every input
// whose offset Align cannot apply (nil without Align).
func CheckAlign(plan []MergeInput, opts MergeOptions) error {
	if !opts.Align {
		return nil
	}
	var bad []string
	for i, in := range plan {
		if !in.OffsetKnown {
			bad = append(bad, fmt.Sprintf("input %d (%s)", i, in.Name))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("align: %w for %s: its manifest or the first input's has no start time", ErrOffsetUnknown, strings.Join(bad, ", "))
}

// MergeManifest is the manifest of the merged bundle: the inputs' runs
// joined, the host and run configuration fields on which every input agrees
// (a field that differs, or that an input with a damaged manifest leaves
// unknown, is left unset and named in LabelMergeDiffers, each input's own
// configuration in merge.N.config and merge.N.host_info), and one label
// group per input with its clock offset (estimated and applied; "unknown"
// when it is). manifests are the inputs' manifests in plan order.
func MergeManifest(plan []MergeInput, opts MergeOptions, manifests []Manifest) Manifest {
	m := Manifest{Tool: opts.Tool, Command: "trace merge",
		Labels: map[string]string{LabelMergeInputs: strconv.Itoa(len(plan)), LabelMergeAlign: strconv.FormatBool(opts.Align)}}
	var cfgs, hosts []any
	known := true
	for i, mf := range manifests {
		if i < len(plan) && plan[i].ManifestDamage != "" {
			known = false // its configuration is unknown: nothing is known to hold for all
		}
		cfgs, hosts = append(cfgs, mf.Config), append(hosts, mf.Host)
	}
	var differs []string
	cfgDiff := commonFields(cfgs, &m.Config, known, "")
	hostDiff := commonFields(hosts, &m.Host, known, "host.")
	differs = append(append(differs, cfgDiff...), hostDiff...)
	if len(differs) > 0 {
		m.Labels[LabelMergeDiffers] = strings.Join(differs, ",")
	}
	seen := map[string]bool{}
	for i, in := range plan {
		if in.Run != "" && !seen[in.Run] {
			seen[in.Run] = true
			if m.Run != "" {
				m.Run += "+"
			}
			m.Run += in.Run
		}
		set := func(k, v string) { m.Labels[fmt.Sprintf(labelMergeFmt, i, k)] = v }
		set("name", in.Name)
		set("host", in.Host)
		set("run", in.Run)
		if !in.Created.IsZero() {
			set("created", in.Created.UTC().Format(time.RFC3339Nano))
		}
		if in.OffsetKnown {
			set("offset_ns", strconv.FormatInt(in.OffsetNS, 10))
		} else {
			set("offset_ns", LabelUnknown)
		}
		set("applied_ns", strconv.FormatInt(in.AppliedNS, 10))
		if i < len(manifests) {
			if in.ManifestDamage != "" {
				set("config", LabelUnknown)
				set("host_info", LabelUnknown)
			} else {
				if len(cfgDiff) > 0 {
					b, _ := json.Marshal(manifests[i].Config) // plain struct: cannot fail
					set("config", string(b))
				}
				if len(hostDiff) > 0 {
					b, _ := json.Marshal(manifests[i].Host)
					set("host_info", string(b))
				}
			}
		}
	}
	return m
}

// commonFields sets *dst to the top-level JSON fields on which every value
// of vals agrees and returns the names of the others, prefixed. With known
// false (an input's value is unknown) every field any input sets differs.
func commonFields(vals []any, dst any, known bool, prefix string) []string {
	var vmaps []map[string]json.RawMessage
	keys := map[string]bool{}
	for _, v := range vals {
		b, _ := json.Marshal(v) // plain structs: cannot fail
		var mm map[string]json.RawMessage
		json.Unmarshal(b, &mm)
		vmaps = append(vmaps, mm)
		for k := range mm {
			keys[k] = true
		}
	}
	common := map[string]json.RawMessage{}
	var differs []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		same := known
		for _, mm := range vmaps {
			v, ok := mm[k]
			if !ok || !bytes.Equal(v, vmaps[0][k]) {
				same = false
				break
			}
		}
		if same {
			common[k] = vmaps[0][k]
		} else {
			differs = append(differs, prefix+k)
		}
	}
	b, _ := json.Marshal(common)
	json.Unmarshal(b, dst)
	return differs
}

// Merge writes the events of inputs to w in one timeline (see the package
// comment above). plan comes from PlanMerge with the same options. Damaged
// and truncated inputs are read as far as they go, their skips counted in
// the report; the inputs' footer drops and refusals are carried into w's
// footer. Merge does not close w or the inputs. It stops at ctx's end with
// ctx's error.
func Merge(ctx context.Context, inputs []*Reader, plan []MergeInput, w *Writer, opts MergeOptions) (MergeReport, error) {
	if len(plan) != len(inputs) {
		return MergeReport{}, errors.New("merge: plan and inputs differ in length")
	}
	if err := CheckAlign(plan, opts); err != nil {
		return MergeReport{}, fmt.Errorf("merge: %w", err)
	}
	window := opts.Window
	if window <= 0 {
		window = DefaultMergeWindow
	}
	rep := MergeReport{Inputs: plan, Aligned: opts.Align}
	if d := MergeManifest(plan, opts, InputManifests(inputs)).Labels[LabelMergeDiffers]; d != "" {
		rep.ConfigDiffers = strings.Split(d, ",")
	}
	pc := &producerCounts{at: map[[2]string]int{}, byRaw: map[string]int{}, rep: &rep}
	h := &mergeHeap{}
	free := make([][]byte, 0, 64)
	held := make([]int, len(inputs))
	eof := make([]bool, len(inputs))
	var seq uint64
	// fill reads from input i until it holds window lines or ends.
	fill := func(i int) error {
		r := inputs[i]
		for !eof[i] && held[i] < window {
			line, kind, ts, err := r.NextLine()
			if err == io.EOF {
				eof[i] = true
				break
			}
			if err != nil {
				return fmt.Errorf("read %s: %w", r.Name(), err)
			}
			in := &rep.Inputs[i]
			if in.Events == 0 || ts < in.FirstTS {
				in.FirstTS = ts
			}
			if in.Events == 0 || ts > in.LastTS {
				in.LastTS = ts
			}
			in.Events++
			pc.count(kind, line)
			rep.BytesIn += uint64(len(line)) + 1
			var buf []byte
			if n := len(free); n > 0 {
				buf, free = free[n-1][:0], free[:n-1]
			}
			buf = append(buf, line...)
			seq++
			heap.Push(h, mergeItem{ts: ts - plan[i].AppliedNS, kind: kind, input: i, seq: seq, line: buf})
			held[i]++
		}
		return nil
	}
	for i := range inputs {
		if err := fill(i); err != nil {
			return rep, err
		}
	}
	var last int64
	var out []byte
	for h.Len() > 0 {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		it := heap.Pop(h).(mergeItem)
		held[it.input]--
		line := it.line
		if applied := plan[it.input].AppliedNS; applied != 0 {
			var err error
			if out, err = retimeLine(out[:0], line, it.ts); err != nil {
				rep.Inputs[it.input].Skipped++
				free = append(free, it.line)
				// Refill before moving on: this input gave up a held line,
				// and without the refill it would run dry of the heap and
				// its remaining lines would never be read.
				if err := fill(it.input); err != nil {
					return rep, err
				}
				continue
			}
			line = out
		}
		if rep.Events > 0 && it.ts < last {
			rep.OutOfOrder++
			rep.MaxLatenessNS = max(rep.MaxLatenessNS, last-it.ts)
		} else {
			last = it.ts
		}
		if err := w.WriteLine(it.kind, it.ts, line); err != nil {
			return rep, fmt.Errorf("%s: %w", mergeWriteError, err)
		}
		rep.Events++
		if cap(it.line) <= 64<<10 {
			free = append(free, it.line)
		}
		if err := fill(it.input); err != nil {
			return rep, err
		}
	}
	var dropped, rejected uint64
	for i, r := range inputs {
		in := &rep.Inputs[i]
		in.Skipped += r.Skipped()
		in.Truncated = r.Truncated()
		in.TruncationReason = r.TruncationReason()
		if in.ManifestDamage == "" {
			in.ManifestDamage = r.ManifestDamage()
		}
		set := func(k, v string) { w.SetFooterLabel(fmt.Sprintf(labelMergeFmt, i, k), v) }
		if f, ok := r.Footer(); ok {
			in.HasFooter = true
			in.Dropped, in.Rejected = f.Dropped, f.Rejected
			dropped += f.Dropped
			rejected += f.Rejected
			if f.DroppedUnknown {
				rep.DroppedUnknown = true // a merge of merges: already a lower bound
			}
			set("footer", "present")
		} else {
			rep.DroppedUnknown = true
			set("footer", "absent")
		}
		set("truncated", strconv.FormatBool(in.Truncated))
		if in.TruncationReason != "" {
			set("truncation_reason", in.TruncationReason)
		}
		set("skipped", strconv.FormatUint(in.Skipped, 10))
		if in.ManifestDamage != "" {
			set("manifest_damage", in.ManifestDamage)
		}
	}
	w.SetDropped(dropped)
	w.AddRejected(rejected)
	if rep.DroppedUnknown {
		w.SetDroppedUnknown()
	}
	return rep, nil
}

// retimeLine rewrites the ts_ns of an event line. Lines in the canonical
// form (every writer's) are patched in place; others are decoded and
// re-encoded.
func retimeLine(dst, line []byte, ts int64) ([]byte, error) {
	const key = `"ts_ns":`
	if i := bytes.Index(line, []byte(key)); i > 0 && bytes.HasPrefix(line, []byte(`{"v":1,"kind":"`)) && i < 64 {
		j := i + len(key)
		k := j
		if k < len(line) && line[k] == '-' {
			k++
		}
		for k < len(line) && line[k] >= '0' && line[k] <= '9' {
			k++
		}
		if k > j && k < len(line) && (line[k] == ',' || line[k] == '}') {
			dst = append(dst, line[:j]...)
			dst = strconv.AppendInt(dst, ts, 10)
			return append(dst, line[k:]...), nil
		}
	}
	ev, _, err := hook.DecodeJSONLine(line)
	if err != nil {
		return dst, err
	}
	ev.TS = ts
	b, err := ev.MarshalJSON()
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

type mergeItem struct {
	ts    int64
	kind  hook.Kind
	input int
	seq   uint64
	line  []byte
}

type mergeHeap []mergeItem

func (h mergeHeap) Len() int { return len(h) }
func (h mergeHeap) Less(i, j int) bool {
	if h[i].ts != h[j].ts {
		return h[i].ts < h[j].ts
	}
	if h[i].input != h[j].input {
		return h[i].input < h[j].input
	}
	return h[i].seq < h[j].seq
}
func (h mergeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)   { *h = append(*h, x.(mergeItem)) }
func (h *mergeHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = mergeItem{}
	*h = old[:len(old)-1]
	return it
}
