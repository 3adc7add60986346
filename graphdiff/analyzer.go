package graphdiff

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// AnalyzerName is the analyzer's name and its section key in run reports.
const AnalyzerName = "graphdiff"

// Analyzer bounds and defaults.
const (
	DefaultWorst       = 8     // worst samples kept in the summary
	DefaultMaxFindings = 10000 // findings emitted per run; the rest are counted
	maxListed          = 32    // positions listed in evidence and reports
)

// Reasons the summary gives for a run without samples.
const (
	NoSamplesGraphsOff = "no captured replay to compare: CUDA graphs are disabled"
	NoSamplesUnknown   = "no graphdiff.sample events, and no run.start to tell why"
	// NoSamplesGraphUnknown: the run.start does not say whether CUDA graphs
	// were on (a real server that did not report its settings).
	NoSamplesGraphUnknown = "no graphdiff.sample events; whether CUDA graphs were on is unknown (the run did not record it), so this says nothing about the graphs"
	NoSamplesNotTaken     = "no graphdiff.sample events: CUDA graphs are on but the source took no graph-vs-eager samples (check its sampling policy, or every batch ran eager above cuda-graph-max-bs)"
)

// HistBin is one bin of the top-k Jaccard histogram: Lo <= J < Hi, except the
// last bin, which is exactly 1 (identical selections).
type HistBin struct {
	Label string  `json:"label"`
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
	Count int     `json:"count"`
}

// jaccardBins are the fixed histogram bins.
var jaccardBins = [...]HistBin{
	{Label: "[0,0.5)", Lo: 0, Hi: 0.5},
	{Label: "[0.5,0.8)", Lo: 0.5, Hi: 0.8},
	{Label: "[0.8,0.9)", Lo: 0.8, Hi: 0.9},
	{Label: "[0.9,1)", Lo: 0.9, Hi: 1},
	{Label: "1", Lo: 1, Hi: 1},
}

func jaccardBin(j float64) int {
	for i, b := range jaccardBins[:len(jaccardBins)-1] {
		if j < b.Hi {
			return i
		}
	}
	return len(jaccardBins) - 1
}

// SampleReport is one judged sample as the summary and the report show it.
type SampleReport struct {
	Step          uint64  `json:"step"`
	Request       string  `json:"request"`
	Session       string  `json:"session,omitempty"`
	Dtype         string  `json:"dtype,omitempty"`
	SeqLen        int     `json:"seq_len,omitempty"`
	Divergent     bool    `json:"divergent"`
	Reason        string  `json:"reason,omitempty"`
	N             int     `json:"n"`
	K             int     `json:"k"`
	MaxAbsDiff    float64 `json:"max_abs_diff"`
	RelRMSE       float64 `json:"rel_rmse"`
	Cosine        float64 `json:"cosine"`
	KL            float64 `json:"kl,omitempty"`
	TopKJaccard   float64 `json:"topk_jaccard"`
	FirstDiffRank int     `json:"first_diff_rank"`
	ArgmaxAgree   bool    `json:"argmax_agree"`
	NonFinite     int     `json:"nonfinite_mismatch,omitempty"`
	MaskedGraph   int     `json:"masked_graph,omitempty"` // positions the graph masked (-Inf) that eager scored
	MissingCount  int     `json:"missing_count"`
	ExtraCount    int     `json:"extra_count"`
	Missing       []int32 `json:"missing,omitempty"` // at most 32, ascending
	Extra         []int32 `json:"extra,omitempty"`
	// MissingNewest is true when every position the graph missed is newer than
	// every position it selected (the shape of a stale sequence length).
	MissingNewest bool `json:"missing_newest,omitempty"`
}

// Summary is the run-level aggregate (the "graphdiff" section of a run report).
type Summary struct {
	Samples           int `json:"samples"`
	Divergent         int `json:"divergent"`
	DivergentRequests int `json:"divergent_requests"`
	DivergentSessions int `json:"divergent_sessions"`
	// DivergentSessionsLeaked counts divergent sessions whose session event
	// reported outcome "leak" (0 when the run carried no session events).
	DivergentSessionsLeaked int `json:"divergent_sessions_leaked"`
	// RawDiffSamples counts samples whose vectors or selections differ at all:
	// with zero divergent, it shows the tolerance absorbed real rounding.
	RawDiffSamples int `json:"raw_diff_samples"`
	// SelectionOnly counts samples that carried their top-k selections but
	// no logit rows (a source's emission policy, like the twin's, sends rows
	// on a sampled subset and on every step whose sides differ beyond
	// rounding): they are judged on the selections, and the vector
	// statistics (RawDiffSamples, MaxAbsDiff, cosine, KL) cover the others.
	SelectionOnly int `json:"selection_only,omitempty"`

	MaxAbsDiff        float64  `json:"max_abs_diff"`
	MaxAbsDiffPassing float64  `json:"max_abs_diff_passing"` // largest among samples judged within tolerance
	MinTopKJaccard    *float64 `json:"min_topk_jaccard"`     // null without samples
	MaxRelRMSE        float64  `json:"max_rel_rmse"`
	MinCosine         *float64 `json:"min_cosine"`
	MaxKL             float64  `json:"max_kl"`

	Reasons            map[string]int `json:"reasons,omitempty"`
	JaccardHist        []HistBin      `json:"jaccard_hist"`
	Worst              []SampleReport `json:"worst"`
	NoSamplesReason    string         `json:"no_samples_reason,omitempty"`
	FindingsSuppressed uint64         `json:"findings_suppressed,omitempty"`
	// IDsCapped: more than MaxTrackedIDs distinct requests, sessions or
	// leaked sessions were seen; the Divergent* counts are lower bounds.
	IDsCapped bool `json:"ids_capped,omitempty"`
}

// MaxTrackedIDs bounds each set of ids the analyzer keeps (divergent
// requests, divergent sessions, leaked sessions), so a collector that runs
// for weeks does not grow with every session it ever saw.
const MaxTrackedIDs = 1 << 16

// Analyzer judges graphdiff.sample events with CompareSample, emits an error
// finding per divergent sample and aggregates the run. It also reads run.start
// (to explain a run without samples) and session events (to say whether the
// divergence sits on leaked sessions). Observe and Result may be called from
// different goroutines.
type Analyzer struct {
	mu   sync.Mutex
	opts Options
	cmp  Comparer

	worstN      int
	maxFindings int
	emitted     int
	suppressed  uint64

	sawStart  bool
	cudaGraph *bool // nil: the run.start did not know

	s          Summary
	hist       [len(jaccardBins)]int
	divReq     map[string]bool
	divSess    map[string]bool
	leaked     map[string]bool // sessions whose session event said leak
	capped     bool            // a set reached MaxTrackedIDs
	worst      []SampleReport
	minJ, minC float64
}

// NewAnalyzer returns a graphdiff analyzer judging with opts (a sample's dtype
// and k override opts' own).
func NewAnalyzer(opts Options) *Analyzer {
	return &Analyzer{
		opts: opts, worstN: DefaultWorst, maxFindings: DefaultMaxFindings,
		divReq: map[string]bool{}, divSess: map[string]bool{}, leaked: map[string]bool{},
		minJ: 1, minC: 1,
	}
}

// KeepWorst sets how many of the worst samples the summary keeps (n < 1:
// DefaultWorst); call it before the first Observe.
func (a *Analyzer) KeepWorst(n int) {
	if n < 1 {
		n = DefaultWorst
	}
	a.worstN = n
}

// Name implements hook.Analyzer.
func (a *Analyzer) Name() string { return AnalyzerName }

// Observe implements hook.Analyzer.
func (a *Analyzer) Observe(ev hook.Event, emit func(hook.Event)) {
	switch b := ev.Body.(type) {
	case *hook.RunStart:
		if b == nil {
			return
		}
		a.mu.Lock()
		a.sawStart, a.cudaGraph = true, b.Config.CUDAGraph
		a.mu.Unlock()
	case *hook.Session:
		if b == nil {
			return
		}
		if b.Outcome != hook.OutcomeLeak {
			return // only leaks are asked about: other outcomes are not kept
		}
		a.mu.Lock()
		a.track(a.leaked, b.ID)
		a.mu.Unlock()
	case *hook.GraphDiffSample:
		if b == nil {
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		r := a.cmp.CompareSample(b, a.opts)
		rep := a.add(b, &r)
		if r.Divergent {
			if a.maxFindings < 0 || a.emitted >= a.maxFindings {
				a.suppressed++
				return
			}
			a.emitted++
			emit(hook.Event{Kind: hook.KindFinding, Body: Finding(rep, &r)})
		}
	}
}

// Report builds the SampleReport of one judged sample.
func Report(s *hook.GraphDiffSample, r *Result) SampleReport {
	rep := SampleReport{
		Step: s.Step, Request: s.Request, Session: s.Session, Dtype: r.Tol.Dtype, SeqLen: s.SeqLen,
		Divergent: r.Divergent, Reason: r.Reason, N: r.N, K: r.K,
		MaxAbsDiff: r.MaxAbsDiff, RelRMSE: r.RelRMSE, Cosine: r.Cosine, KL: r.KL,
		TopKJaccard: r.TopKJaccard, FirstDiffRank: r.FirstDiffRank, ArgmaxAgree: r.ArgmaxAgree,
		NonFinite: r.NonFinite, MaskedGraph: r.MaskedGraph,
		MissingCount: len(r.Missing), ExtraCount: len(r.Extra),
		Missing: clip(r.Missing), Extra: clip(r.Extra),
	}
	if len(r.Missing) > 0 && len(r.SelGraph) > 0 {
		rep.MissingNewest = r.Missing[0] > slices.Max(r.SelGraph)
	}
	return rep
}

func clip(p []int32) []int32 {
	if len(p) > maxListed {
		p = p[:maxListed]
	}
	return slices.Clone(p)
}

func (a *Analyzer) add(b *hook.GraphDiffSample, r *Result) SampleReport {
	rep := Report(b, r)
	s := &a.s
	s.Samples++
	if len(b.Graph) == 0 && len(b.Eager) == 0 && (len(b.TopKGraph) > 0 || len(b.TopKEager) > 0) {
		s.SelectionOnly++
	}
	if r.MaxAbsDiff > 0 || r.NonFinite > 0 || len(r.Missing)+len(r.Extra) > 0 || r.FirstDiffRank >= 0 || r.LenGraph != r.LenEager {
		s.RawDiffSamples++
	}
	s.MaxAbsDiff = max(s.MaxAbsDiff, r.MaxAbsDiff)
	s.MaxRelRMSE = max(s.MaxRelRMSE, r.RelRMSE)
	if r.KLValid {
		s.MaxKL = max(s.MaxKL, r.KL)
	}
	a.minJ = min(a.minJ, r.TopKJaccard)
	a.minC = min(a.minC, r.Cosine)
	a.hist[jaccardBin(r.TopKJaccard)]++
	if r.Divergent {
		s.Divergent++
		if s.Reasons == nil {
			s.Reasons = map[string]int{}
		}
		s.Reasons[r.Reason]++
		a.track(a.divReq, b.Request)
		if b.Session != "" {
			a.track(a.divSess, b.Session)
		}
	} else {
		s.MaxAbsDiffPassing = max(s.MaxAbsDiffPassing, r.MaxAbsDiff)
	}
	// Keep the worst samples: insert in order, drop the tail.
	i, _ := slices.BinarySearchFunc(a.worst, rep, worseFirst)
	if i < a.worstN {
		a.worst = slices.Insert(a.worst, i, rep)
		if len(a.worst) > a.worstN {
			a.worst = a.worst[:a.worstN]
		}
	}
	return rep
}

// worseFirst orders samples most damning first: divergent, lower Jaccard,
// larger max abs diff, larger relative RMSE, then step and request for a
// deterministic order.
func worseFirst(x, y SampleReport) int {
	if x.Divergent != y.Divergent {
		if x.Divergent {
			return -1
		}
		return 1
	}
	return cmp.Or(
		cmp.Compare(x.TopKJaccard, y.TopKJaccard),
		-cmp.Compare(x.MaxAbsDiff, y.MaxAbsDiff),
		-cmp.Compare(x.RelRMSE, y.RelRMSE),
		cmp.Compare(x.Step, y.Step),
		cmp.Compare(x.Request, y.Request),
	)
}

// track adds id to set unless set holds MaxTrackedIDs ids (a.mu held).
func (a *Analyzer) track(set map[string]bool, id string) {
	if len(set) >= MaxTrackedIDs && !set[id] {
		a.capped = true
		return
	}
	set[id] = true
}

// Result returns the run-level aggregate so far.
func (a *Analyzer) Result() Summary {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.s
	s.DivergentRequests = len(a.divReq)
	s.DivergentSessions = len(a.divSess)
	s.DivergentSessionsLeaked = 0
	s.IDsCapped = a.capped
	for id := range a.divSess {
		if a.leaked[id] {
			s.DivergentSessionsLeaked++
		}
	}
	if s.Samples > 0 {
		j, c := a.minJ, a.minC
		s.MinTopKJaccard, s.MinCosine = &j, &c
	}
	if s.Reasons != nil {
		s.Reasons = maps.Clone(s.Reasons)
	}
	s.JaccardHist = make([]HistBin, len(jaccardBins))
	for i, b := range jaccardBins {
		b.Count = a.hist[i]
		s.JaccardHist[i] = b
	}
	s.Worst = slices.Clone(a.worst)
	if s.Worst == nil {
		s.Worst = []SampleReport{}
	}
	if s.Samples == 0 {
		switch {
		case !a.sawStart:
			s.NoSamplesReason = NoSamplesUnknown
		case a.cudaGraph == nil:
			s.NoSamplesReason = NoSamplesGraphUnknown
		case !*a.cudaGraph:
			s.NoSamplesReason = NoSamplesGraphsOff
		default:
			s.NoSamplesReason = NoSamplesNotTaken
		}
	}
	s.FindingsSuppressed = a.suppressed
	return s
}

// Finding is the error finding for one divergent sample.
func Finding(rep SampleReport, r *Result) *hook.Finding {
	ev := map[string]string{
		"step":            strconv.FormatUint(rep.Step, 10),
		"request":         rep.Request,
		"reason":          rep.Reason,
		"dtype":           rep.Dtype,
		"n":               strconv.Itoa(rep.N),
		"k":               strconv.Itoa(rep.K),
		"max_abs_diff":    fmtFloat(rep.MaxAbsDiff),
		"rel_rmse":        fmtFloat(rep.RelRMSE),
		"cosine":          fmtFloat(rep.Cosine),
		"topk_jaccard":    fmtFloat(rep.TopKJaccard),
		"first_diff_rank": strconv.Itoa(rep.FirstDiffRank),
		"argmax_graph":    strconv.Itoa(r.ArgmaxGraph),
		"argmax_eager":    strconv.Itoa(r.ArgmaxEager),
		"missing_count":   strconv.Itoa(rep.MissingCount),
		"extra_count":     strconv.Itoa(rep.ExtraCount),
		"missing":         joinPositions(rep.Missing, rep.MissingCount),
		"extra":           joinPositions(rep.Extra, rep.ExtraCount),
		"not_close":       strconv.Itoa(r.NotClose),
		"nonfinite":       strconv.Itoa(r.NonFinite),
		"masked_graph":    strconv.Itoa(r.MaskedGraph),
	}
	if rep.Session != "" {
		ev["session"] = rep.Session
	}
	if rep.SeqLen > 0 {
		ev["seq_len"] = strconv.Itoa(rep.SeqLen)
	}
	if rep.MissingNewest {
		ev["missing_newest"] = "true"
	}
	if r.KLValid {
		ev["kl"] = fmtFloat(r.KL)
	}
	if r.HasRef {
		ev["graph_ref_rmse"] = fmtFloat(r.GraphRefRMSE)
		ev["eager_ref_rmse"] = fmtFloat(r.EagerRefRMSE)
	}
	return &hook.Finding{
		Analyzer: AnalyzerName,
		Severity: hook.SevError,
		Summary:  Headline(rep),
		Evidence: ev,
	}
}

// Headline is the one-line description of a divergent sample.
func Headline(rep SampleReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "GRAPH≠EAGER step %d request %s: ", rep.Step, rep.Request)
	switch rep.Reason {
	case ReasonSelection:
		fmt.Fprintf(&b, "top-%d selection changed (Jaccard %.3f, first differing rank %d, %d missing, %d extra",
			rep.K, rep.TopKJaccard, rep.FirstDiffRank, rep.MissingCount, rep.ExtraCount)
		if rep.MissingNewest {
			fmt.Fprintf(&b, "; missing the newest positions, from %d", rep.Missing[0])
		}
		b.WriteString(")")
	case ReasonNonFinite:
		if rep.MaskedGraph == rep.NonFinite {
			fmt.Fprintf(&b, "the graph masked %d %s (-Inf) that eager scored; top-%d selection unchanged",
				rep.MaskedGraph, plural(rep.MaskedGraph, "position"), rep.K)
		} else {
			fmt.Fprintf(&b, "NaN/Inf on one side only at %d positions", rep.NonFinite)
		}
	case ReasonLength:
		b.WriteString("graph and eager vectors differ in length")
	case ReasonTop1:
		fmt.Fprintf(&b, "argmax moved beyond rounding (max abs diff %s)", fmtFloat(rep.MaxAbsDiff))
	case ReasonRefRMSE:
		fmt.Fprintf(&b, "graph error vs the float64 reference exceeds the eager bound (max abs diff %s)", fmtFloat(rep.MaxAbsDiff))
	default:
		fmt.Fprintf(&b, "not allclose (max abs diff %s, rel RMSE %s)", fmtFloat(rep.MaxAbsDiff), fmtFloat(rep.RelRMSE))
	}
	return b.String()
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', 6, 64) }

func joinPositions(p []int32, total int) string {
	var b strings.Builder
	for i, v := range p {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(v)))
	}
	if total > len(p) {
		fmt.Fprintf(&b, ",…(+%d)", total-len(p))
	}
	return b.String()
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
