package logscan

import (
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Caps on the per-event lists a Summary keeps; counts are always exact.
const (
	MaxRetractions = 1000 // retractions listed with their timestamps
	MaxSamples     = 20   // raw canary / checksum / preemption lines kept
	MaxPDFailures  = 1000 // transfer failures and metadata corruptions listed with their rooms
	// MaxRooms bounds the distinct rooms remembered to count
	// TransferFailedRooms and MetadataCorruptedRooms (16 bytes or so each);
	// past it the counts are lower bounds and RoomsCapped is set.
	MaxRooms = 1 << 20
)

// TransferFailure is one SGLang PD "Prefill/Decode transfer failed for
// request" line. SGLang logs a failure once per TP rank, so one room
// usually has several.
type TransferFailure struct {
	Line int64      `json:"line"`
	Time string     `json:"time,omitempty"`
	Side string     `json:"side"` // "prefill" | "decode": which side logged it
	Rank int        `json:"rank"` // -1 when the line had none
	Rid  string     `json:"rid"`
	Room hook.Dec64 `json:"bootstrap_room"`
	// Reason is the transfer engine's exception text after "with exception".
	Reason string `json:"reason,omitempty"`
}

// MetadataCorruption is one SGLang PD decode "Context corruption detected"
// line: request Rid (room Room) received the metadata written for room
// FromRoom through buffer index BufferIndex (a metadata buffer index
// collision).
type MetadataCorruption struct {
	Line        int64      `json:"line"`
	Time        string     `json:"time,omitempty"`
	Rid         string     `json:"rid"`
	Room        hook.Dec64 `json:"bootstrap_room"`
	FromRoom    hook.Dec64 `json:"from_bootstrap_room"`
	BufferIndex int        `json:"metadata_buffer_index"` // -1 when the line had none
}

// PDDecode aggregates the PD decode queue fields of SGLang decode lines
// ("pre-allocated usage", "#prealloc-req", "#transfer-req", "#retracted-req"),
// over the lines that carry them.
type PDDecode struct {
	Batches           int64   `json:"batches"` // decode lines carrying PD queue fields
	PeakPreallocReq   int     `json:"peak_prealloc_req"`
	PeakTransferReq   int     `json:"peak_transfer_req"`
	PeakRetractedReq  int     `json:"peak_retracted_req"` // the retracted queue's length (a gauge, not retraction events)
	PeakPreallocUsage float64 `json:"peak_preallocated_usage"`
}

// Speculative aggregates SGLang's speculative decoding fields of decode
// lines ("accept len", "accept rate"): averages are over the lines that
// carry each field (one line per logging interval, unweighted).
type Speculative struct {
	Batches       int64   `json:"batches"` // decode lines carrying accept len or accept rate
	AvgAcceptLen  float64 `json:"avg_accept_len"`
	MinAcceptLen  float64 `json:"min_accept_len"`
	AvgAcceptRate float64 `json:"avg_accept_rate"`
	MinAcceptRate float64 `json:"min_accept_rate"`

	lenN, rateN     int64
	lenSum, rateSum float64
}

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
	// SGLang PD failures: lines, and the distinct rooms they name.
	TransferFailures        int64  `json:"transfer_failures"`
	PrefillTransferFailures int64  `json:"prefill_transfer_failures"`
	DecodeTransferFailures  int64  `json:"decode_transfer_failures"`
	TransferFailedRooms     int64  `json:"transfer_failed_rooms"`
	MetadataCorruptions     int64  `json:"metadata_corruptions"`
	MetadataCorruptedRooms  int64  `json:"metadata_corrupted_rooms"` // rooms that received another room's metadata
	RoomsCapped             bool   `json:"rooms_capped,omitempty"`   // more than MaxRooms distinct rooms: the room counts are lower bounds
	Unrecognized            int64  `json:"unrecognized"`             // includes long lines whose first MaxLine bytes are unrecognized
	Blank                   int64  `json:"blank"`
	LongLines               int64  `json:"long_lines"` // lines over MaxLine: parsed by their first MaxLine bytes
	BadFields               int64  `json:"bad_fields"` // values that did not parse on otherwise recognized lines
	Start                   string `json:"start,omitempty"`
	End                     string `json:"end,omitempty"`

	Retractions        []Retraction `json:"retractions"`
	RetractionsOmitted int64        `json:"retractions_omitted,omitempty"`
	CanaryLines        []Sample     `json:"canary_lines,omitempty"`
	ChecksumLines      []Sample     `json:"checksum_lines,omitempty"`
	PreemptionLines    []Sample     `json:"preemption_lines,omitempty"`

	TransferFailureLines     []TransferFailure    `json:"transfer_failure_lines,omitempty"`
	TransferFailuresOmitted  int64                `json:"transfer_failures_omitted,omitempty"`
	MetadataCorruptionLines  []MetadataCorruption `json:"metadata_corruption_lines,omitempty"`
	MetadataCorruptedOmitted int64                `json:"metadata_corruptions_omitted,omitempty"`

	// PD and Speculative are nil when no decode line carried their fields
	// (not measured, rather than zero).
	PD          *PDDecode    `json:"pd_decode,omitempty"`
	Speculative *Speculative `json:"speculative,omitempty"`

	xferRooms, metaRooms map[uint64]struct{}

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
		} else if r.Fields&(FieldPrealloc|FieldAcceptLen|FieldAcceptRate) != 0 {
			s.addDecodeExtras(r)
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
	case KindTransferFailure:
		s.TransferFailures++
		if r.Side == "prefill" {
			s.PrefillTransferFailures++
		} else {
			s.DecodeTransferFailures++
		}
		if r.Fields&FieldRoom != 0 && s.addRoom(&s.xferRooms, r.Room) {
			s.TransferFailedRooms++
		}
		if len(s.TransferFailureLines) < MaxPDFailures {
			s.TransferFailureLines = append(s.TransferFailureLines, TransferFailure{
				Line: r.Line, Time: s.fmtTS(r.TS), Side: r.Side, Rank: r.Rank, Rid: r.Rid,
				Room: hook.Dec64(r.Room), Reason: r.FailureText,
			})
		} else {
			s.TransferFailuresOmitted++
		}
	case KindMetadataCorruption:
		s.MetadataCorruptions++
		if r.Fields&FieldRoom != 0 && s.addRoom(&s.metaRooms, r.Room) {
			s.MetadataCorruptedRooms++
		}
		if len(s.MetadataCorruptionLines) < MaxPDFailures {
			s.MetadataCorruptionLines = append(s.MetadataCorruptionLines, MetadataCorruption{
				Line: r.Line, Time: s.fmtTS(r.TS), Rid: r.Rid, Room: hook.Dec64(r.Room),
				FromRoom: hook.Dec64(r.FromRoom), BufferIndex: r.MetaIndex,
			})
		} else {
			s.MetadataCorruptedOmitted++
		}
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

// addDecodeExtras folds an SGLang decode line's PD queue and speculative
// fields.
func (s *Summary) addDecodeExtras(r *Record) {
	if r.Fields&FieldPrealloc != 0 {
		if s.PD == nil {
			s.PD = &PDDecode{}
		}
		p := s.PD
		p.Batches++
		p.PeakPreallocReq = max(p.PeakPreallocReq, r.PreallocReq)
		p.PeakTransferReq = max(p.PeakTransferReq, r.TransferReq)
		p.PeakRetractedReq = max(p.PeakRetractedReq, r.RetractedQueue)
		p.PeakPreallocUsage = max(p.PeakPreallocUsage, r.PreallocUsage)
	}
	if r.Fields&(FieldAcceptLen|FieldAcceptRate) != 0 {
		if s.Speculative == nil {
			s.Speculative = &Speculative{}
		}
		sp := s.Speculative
		sp.Batches++
		if r.Fields&FieldAcceptLen != 0 {
			if sp.lenN == 0 || r.AcceptLen < sp.MinAcceptLen {
				sp.MinAcceptLen = r.AcceptLen
			}
			sp.lenN++
			sp.lenSum += r.AcceptLen
		}
		if r.Fields&FieldAcceptRate != 0 {
			if sp.rateN == 0 || r.AcceptRate < sp.MinAcceptRate {
				sp.MinAcceptRate = r.AcceptRate
			}
			sp.rateN++
			sp.rateSum += r.AcceptRate
		}
	}
}

// addRoom remembers room in *set and reports whether it is new; past
// MaxRooms distinct rooms it stops remembering and sets RoomsCapped.
func (s *Summary) addRoom(set *map[uint64]struct{}, room uint64) bool {
	if *set == nil {
		*set = map[uint64]struct{}{}
	}
	if _, ok := (*set)[room]; ok {
		return false
	}
	if len(*set) >= MaxRooms {
		s.RoomsCapped = true
		return false
	}
	(*set)[room] = struct{}{}
	return true
}

func (s *Summary) sample(dst []Sample, r *Record) []Sample {
	if len(dst) >= MaxSamples {
		return dst
	}
	return append(dst, Sample{Line: r.Line, Time: s.fmtTS(r.TS), Text: sampleText(r.Raw)})
}

// MaxSampleText bounds the text a Sample keeps of its line: evidence to
// read, not the line (one of up to MaxLine bytes printed whole flooded the
// terminal). What is cut is said, with its size.
const MaxSampleText = 512

func sampleText(line string) string {
	if len(line) <= MaxSampleText {
		return line
	}
	cut := MaxSampleText
	for cut > 0 && !utf8.RuneStart(line[cut]) {
		cut-- // never split a character
	}
	return line[:cut] + fmt.Sprintf("… (%d more bytes)", len(line)-cut)
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
	if sp := s.Speculative; sp != nil {
		if sp.lenN > 0 {
			sp.AvgAcceptLen = sp.lenSum / float64(sp.lenN)
		}
		if sp.rateN > 0 {
			sp.AvgAcceptRate = sp.rateSum / float64(sp.rateN)
		}
	}
}

// Clone returns a finished deep copy (Tail hands out snapshots).
func (s *Summary) Clone() *Summary {
	c := *s
	if s.PD != nil {
		pd := *s.PD
		c.PD = &pd
	}
	if s.Speculative != nil {
		sp := *s.Speculative
		c.Speculative = &sp
	}
	// A snapshot is not added to: it needs no room sets.
	c.xferRooms, c.metaRooms = nil, nil
	c.Finish()
	c.TransferFailureLines = append([]TransferFailure(nil), s.TransferFailureLines...)
	c.MetadataCorruptionLines = append([]MetadataCorruption(nil), s.MetadataCorruptionLines...)
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
