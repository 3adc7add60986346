package traces

import (
	"bytes"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
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
	// this manifest's start time less the first one's.
	OffsetNS int64 `json:"offset_ns"`
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
	Dropped          uint64 `json:"dropped"`  // from its footer
	Rejected         uint64 `json:"rejected"` // from its footer
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
}

// Manifest labels of a merged bundle (N is the input's index).
const (
	LabelMergeInputs = "merge.inputs"  // number of inputs
	LabelMergeAlign  = "merge.aligned" // "true" when offsets were applied
	labelMergeFmt    = "merge.%d.%s"   // name, host, run, created, offset_ns, applied_ns
	mergeWriteError  = "write merged bundle"
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
		}
		if opts.Align {
			in.AppliedNS = in.OffsetNS
		}
		out[i] = in
	}
	return out
}

// MergeManifest is the manifest of the merged bundle: the first input's
// host and run configuration, the runs joined, and one label group per input
// with its clock offset (estimated and applied).
func MergeManifest(plan []MergeInput, opts MergeOptions, first Manifest) Manifest {
	m := Manifest{Tool: opts.Tool, Host: first.Host, Config: first.Config, Command: "trace merge",
		Labels: map[string]string{LabelMergeInputs: strconv.Itoa(len(plan)), LabelMergeAlign: strconv.FormatBool(opts.Align)}}
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
		set("offset_ns", strconv.FormatInt(in.OffsetNS, 10))
		set("applied_ns", strconv.FormatInt(in.AppliedNS, 10))
	}
	return m
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
	window := opts.Window
	if window <= 0 {
		window = DefaultMergeWindow
	}
	rep := MergeReport{Inputs: plan, Aligned: opts.Align}
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
		if f, ok := r.Footer(); ok {
			in.Dropped, in.Rejected = f.Dropped, f.Rejected
			dropped += f.Dropped
			rejected += f.Rejected
		}
	}
	w.SetDropped(dropped)
	w.AddRejected(rejected)
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
