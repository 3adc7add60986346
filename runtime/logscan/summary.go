package logscan

import (
	"io"
	"time"
)

// Caps on the per-event lists a Summary keeps; counts are always exact.
const (
	MaxRetractions = 1000 // retractions listed with their timestamps
	MaxSamples     = 20   // raw canary / checksum / preemption lines kept
)

// Retraction is one SGLang retraction line with the scheduler state the log
// showed just before it.
type Retraction struct {
	Line          int64      `json:"line"`
	Time          string     `json:"time,omitempty"` // RFC 3339 in the scan's location; empty when the line had no timestamp
	TS            int64      `json:"ts_ns,omitempty"`
	Retracted     int        `json:"retracted"`
	NewTokenRatio [2]float64 `json:"new_token_ratio"` // before, after
	TokenUsage    float64    `json:"token_usage"`     // the last token usage logged before it
	RunningReq    int        `json:"running_req"`     // the last decode #running-req logged before it
}

// Sample is one raw line kept as evidence, with its position.
type Sample struct {
	Line int64  `json:"line"`
	Time string `json:"time,omitempty"`
	Text string `json:"text"`
}

// Summary aggregates a log. Its JSON form is the `kvcanary logs scan --json`
// contract. For vLLM logs DecodeBatches counts the periodic engine lines,
// token usage is the GPU KV cache usage as a fraction, and preemptions are
// counted in Preemptions (warnings plus the V1 per-interval "Preemptions: N").
type Summary struct {
	Format             string  `json:"format"` // "sglang" | "vllm" | "mixed" | "unknown"
	Lines              int64   `json:"lines"`
	DecodeBatches      int64   `json:"decode_batches"`
	PrefillBatches     int64   `json:"prefill_batches"`
	PeakRunningReq     int     `json:"peak_running_req"` // over decode / engine lines
	PeakTokenUsage     float64 `json:"peak_token_usage"` // over every batch line
	PeakQueueReq       int     `json:"peak_queue_req"`
	CUDAGraphBatches   int64   `json:"cuda_graph_batches"` // decode batches logged with "cuda graph: True"
	RetractionEvents   int64   `json:"retraction_events"`
	RetractedReqs      int64   `json:"retracted_reqs"`
	CanaryViolations   int64   `json:"canary_violations"`
	ChecksumMismatches int64   `json:"checksum_mismatches"`
	Preemptions        int64   `json:"preemptions"`
	Unrecognized       int64   `json:"unrecognized"` // includes long lines whose first MaxLine bytes are unrecognized
	Blank              int64   `json:"blank"`
	LongLines          int64   `json:"long_lines"` // lines over MaxLine: parsed by their first MaxLine bytes
	BadFields          int64   `json:"bad_fields"` // values that did not parse on otherwise recognized lines
	Start              string  `json:"start,omitempty"`
	End                string  `json:"end,omitempty"`

	Retractions        []Retraction `json:"retractions"`
	RetractionsOmitted int64        `json:"retractions_omitted,omitempty"`
	CanaryLines        []Sample     `json:"canary_lines,omitempty"`
	ChecksumLines      []Sample     `json:"checksum_lines,omitempty"`
	PreemptionLines    []Sample     `json:"preemption_lines,omitempty"`

	loc            *time.Location
	sglang, vllm   int64
	firstTS        int64
	lastTS         int64
	lastRunning    int
	lastTokenUsage float64
}

// NewSummary returns an empty summary whose times are shown in opts.Location.
func NewSummary(opts Options) *Summary {
	loc := opts.Location
	if loc == nil {
		loc = time.UTC
	}
	return &Summary{Format: "unknown", Retractions: []Retraction{}, loc: loc}
}

// Add folds one record into the summary.
func (s *Summary) Add(r *Record) {
	s.Lines++
	s.BadFields += int64(r.BadFields)
	if r.TS != 0 {
		if s.firstTS == 0 || r.TS < s.firstTS {
			s.firstTS = r.TS
		}
		s.lastTS = max(s.lastTS, r.TS)
	}
	// Format votes: the message's engine, else the log prefix's (a log with
	// no batch lines yet still shows whose it is).
	eng := r.Engine
	if eng == EngineUnknown {
		eng = r.Prefix
	}
	switch eng {
	case EngineSGLang:
		s.sglang++
	case EngineVLLM:
		s.vllm++
	}
	if r.Long {
		s.LongLines++
	}
	switch r.Kind {
	case KindBlank:
		s.Blank++
	case KindUnrecognized:
		s.Unrecognized++
	case KindDecode, KindEngineStats:
		s.DecodeBatches++
		s.PeakRunningReq = max(s.PeakRunningReq, r.RunningReq)
		s.PeakQueueReq = max(s.PeakQueueReq, r.QueueReq)
		s.PeakTokenUsage = max(s.PeakTokenUsage, r.TokenUsage)
		if r.CUDAGraph {
			s.CUDAGraphBatches++
		}
		s.lastRunning, s.lastTokenUsage = r.RunningReq, r.TokenUsage
		if r.Kind == KindEngineStats {
			s.Preemptions += int64(r.Preemptions)
		}
	case KindPrefill:
		s.PrefillBatches++
		s.PeakQueueReq = max(s.PeakQueueReq, r.QueueReq)
		s.PeakTokenUsage = max(s.PeakTokenUsage, r.TokenUsage)
		if r.Fields&FieldTokenUsage != 0 {
			s.lastTokenUsage = r.TokenUsage
		}
	case KindRetract:
		s.RetractionEvents++
		s.RetractedReqs += int64(r.Retracted)
		if len(s.Retractions) < MaxRetractions {
			s.Retractions = append(s.Retractions, Retraction{
				Line: r.Line, TS: r.TS, Time: s.fmtTS(r.TS), Retracted: r.Retracted,
				NewTokenRatio: [2]float64{r.RatioBefore, r.RatioAfter},
				TokenUsage:    s.lastTokenUsage, RunningReq: s.lastRunning,
			})
		} else {
			s.RetractionsOmitted++
		}
	case KindCanaryViolation:
		s.CanaryViolations++
		s.CanaryLines = s.sample(s.CanaryLines, r)
	case KindChecksumMismatch:
		s.ChecksumMismatches++
		s.ChecksumLines = s.sample(s.ChecksumLines, r)
	case KindPreemption:
		s.Preemptions++
		s.PreemptionLines = s.sample(s.PreemptionLines, r)
	}
	switch {
	case s.sglang > 0 && s.vllm > 0:
		s.Format = "mixed"
	case s.sglang > 0:
		s.Format = "sglang"
	case s.vllm > 0:
		s.Format = "vllm"
	}
}

func (s *Summary) sample(dst []Sample, r *Record) []Sample {
	if len(dst) >= MaxSamples {
		return dst
	}
	return append(dst, Sample{Line: r.Line, Time: s.fmtTS(r.TS), Text: r.Raw})
}

func (s *Summary) fmtTS(ts int64) string {
	if ts == 0 {
		return ""
	}
	loc := s.loc
	if loc == nil {
		loc = time.UTC
	}
	return time.Unix(0, ts).In(loc).Format(time.RFC3339Nano)
}

// Finish fills the fields derived at the end (Start, End). ScanAll and Clone
// call it; call it yourself after feeding records with Add.
func (s *Summary) Finish() {
	s.Start, s.End = s.fmtTS(s.firstTS), s.fmtTS(s.lastTS)
}

// Clone returns a finished deep copy (Tail hands out snapshots).
func (s *Summary) Clone() *Summary {
	c := *s
	c.Finish()
	c.Retractions = append([]Retraction(nil), s.Retractions...)
	c.CanaryLines = append([]Sample(nil), s.CanaryLines...)
	c.ChecksumLines = append([]Sample(nil), s.ChecksumLines...)
	c.PreemptionLines = append([]Sample(nil), s.PreemptionLines...)
	if c.Retractions == nil {
		c.Retractions = []Retraction{}
	}
	return &c
}

// ScanAll reads r to the end and summarizes it; name identifies the input in
// errors. Unknown lines are counted, never fatal: the only errors are the
// reader's, and the summary of everything read before one is still returned.
func ScanAll(r io.Reader, name string, opts Options) (*Summary, error) {
	sc := NewScanner(r, name, opts)
	sum := NewSummary(opts)
	for sc.Scan() {
		sum.Add(sc.Record())
	}
	sum.Finish()
	return sum, sc.Err()
}
