package analyzers

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// MaxCoverageProducers bounds the producers a Coverage lists; the totals
// count all of them.
const MaxCoverageProducers = 64

// maxNoteLen bounds one producer's error note as a Coverage keeps it.
const maxNoteLen = 512

// ProducerEnd is one producer's run.end: who it was and what it said it lost.
type ProducerEnd struct {
	Node    string `json:"node,omitempty"`
	Proc    string `json:"proc,omitempty"`
	PID     int32  `json:"pid,omitempty"`
	Role    string `json:"role,omitempty"`
	Rank    int32  `json:"rank,omitempty"`
	Dropped uint64 `json:"dropped,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Who names the producer, e.g. "python3 pid 7909 (decode rank 1)".
func (p ProducerEnd) Who() string {
	s := p.Proc
	if s == "" {
		s = "producer"
	}
	if p.PID != 0 {
		s += fmt.Sprintf(" pid %d", p.PID)
	}
	if p.Node != "" {
		s += " on " + p.Node
	}
	if p.Role != "" {
		s += fmt.Sprintf(" (%s rank %d)", p.Role, p.Rank)
	}
	return s
}

// Coverage is what a bundle's producers said, in their run.end events, about
// the evidence they did not deliver: events dropped and error notes
// ("canary.replay off: 3 errors", "4 room checksums skipped (index-K on the
// host)"). A verdict over a bundle whose producers lost evidence relevant to
// its layer is partial, never clean: what was not observed is unknown.
type Coverage struct {
	Ends      int           `json:"run_ends"`            // run.end events read
	Dropped   uint64        `json:"dropped"`             // events the producers dropped, all of them
	Producers []ProducerEnd `json:"producers,omitempty"` // those that dropped or reported an error, first MaxCoverageProducers
	Lossy     int           `json:"lossy_producers"`     // producers that dropped or reported an error, all of them
	// Silent names the TP ranks that never reported although an engine
	// process of their role said how many ranks it runs (its run.start's
	// tp_size): "decode rank 1 of 2 never reported". What such a rank did is
	// unknown, so every layer's verdict is partial.
	Silent []string `json:"silent_ranks,omitempty"`
	// Counts holds, per producer process (src.node, src.pid), the events
	// the bundles read hold and the sent count its run.end reported (0: not
	// known), for the first MaxCoverageCounted producers. A producer that
	// sent more than the bundles hold lost events on the way (a collector
	// killed before it flushed): Lost names it.
	Counts []ProducerCount `json:"producer_counts,omitempty"`
	// Uncounted is the events of producers beyond MaxCoverageCounted:
	// whether those producers lost any is not known.
	Uncounted uint64 `json:"uncounted_events,omitempty"`
}

// MaxCoverageCounted bounds the producers whose events a Coverage counts.
const MaxCoverageCounted = 4096

// ProducerCount is one producer process's events: those the bundles hold
// (run.end aside) and the count it said it sent (run.end's sent).
type ProducerCount struct {
	ProducerEnd
	Sent uint64 `json:"sent,omitempty"` // 0: not known
	Held uint64 `json:"held"`
}

type producerKey struct {
	node string
	pid  int32
}

func (p ProducerCount) key() producerKey { return producerKey{p.Node, p.PID} }

// CoverageCollector builds a Coverage from the run.end events it observes.
// Reading the same bundle twice adds nothing: a run.end is counted once per
// producer and timestamp.
type CoverageCollector struct {
	seen  map[coverageKey]bool
	c     Coverage
	ranks map[string]*roleRanks // by src.role ("" outside PD)
	count map[producerKey]int   // index into c.Counts
}

// roleRanks is what a role's engine processes said about their ranks.
type roleRanks struct {
	world  int          // the largest tp_size an engine process of the role reported
	lo, hi int          // the ranks this node runs, [lo, hi): all of them unless several nodes share them
	seen   map[int]bool // ranks that sent anything
}

type coverageKey struct {
	src hook.Source
	ts  int64
}

// NewCoverageCollector returns an empty collector.
func NewCoverageCollector() *CoverageCollector {
	return &CoverageCollector{seen: map[coverageKey]bool{}, ranks: map[string]*roleRanks{}}
}

// Observe takes one event: run.end events (what producers lost), engine
// processes' run.start events (how many ranks their role runs, and their
// own rank) and the rank in any engine event's src.
func (cc *CoverageCollector) Observe(ev hook.Event) {
	cc.observeRank(ev)
	pc := cc.producer(ev.Src)
	b, ok := ev.Body.(*hook.RunEnd)
	if !ok || b == nil {
		if pc != nil {
			pc.Held++
		}
		return
	}
	k := coverageKey{ev.Src, ev.TS}
	if cc.seen[k] {
		return
	}
	cc.seen[k] = true
	if pc != nil {
		pc.Sent = max(pc.Sent, b.Sent)
	}
	cc.c.Ends++
	if b.Dropped == 0 && b.Error == "" {
		return
	}
	cc.c.Dropped += b.Dropped
	cc.c.Lossy++
	if len(cc.c.Producers) < MaxCoverageProducers {
		e := b.Error
		if len(e) > maxNoteLen {
			e = e[:maxNoteLen] + "…"
		}
		cc.c.Producers = append(cc.c.Producers, ProducerEnd{Node: ev.Src.Node, Proc: ev.Src.Proc, PID: ev.Src.PID,
			Role: ev.Src.Role, Rank: ev.Src.Rank, Dropped: b.Dropped, Error: e})
	}
}

// producer returns src's count, nil once MaxCoverageCounted others are.
func (cc *CoverageCollector) producer(src hook.Source) *ProducerCount {
	if cc.count == nil {
		cc.count = map[producerKey]int{}
	}
	k := producerKey{src.Node, src.PID}
	i, ok := cc.count[k]
	if !ok {
		if len(cc.c.Counts) >= MaxCoverageCounted {
			cc.c.Uncounted++
			return nil
		}
		i = len(cc.c.Counts)
		cc.count[k] = i
		cc.c.Counts = append(cc.c.Counts, ProducerCount{ProducerEnd: ProducerEnd{Node: src.Node, Proc: src.Proc, PID: src.PID,
			Role: src.Role, Rank: src.Rank}})
	}
	return &cc.c.Counts[i]
}

func (cc *CoverageCollector) observeRank(ev hook.Event) {
	role := ev.Src.Role
	rank, known := int(ev.Src.Rank), role != ""
	if rs, ok := ev.Body.(*hook.RunStart); ok && rs != nil && ev.Kind == hook.KindRunStart && engineConfig(rs.Config) {
		r := cc.role(role)
		if rs.Config.TPSize > r.world {
			r.world, r.lo, r.hi = rs.Config.TPSize, 0, rs.Config.TPSize
			// Several nodes share the TP ranks (SGLang's --nnodes,
			// --node-rank): a bundle of this node sees its slice only.
			nn, e1 := strconv.Atoi(rs.Config.Extra["nnodes"])
			nr, e2 := strconv.Atoi(rs.Config.Extra["node_rank"])
			if e1 == nil && e2 == nil && nn > 1 && nr >= 0 && nr < nn && r.world%nn == 0 {
				per := r.world / nn
				r.lo, r.hi = nr*per, (nr+1)*per
			}
		}
		if !known && rs.TPRank != nil && *rs.TPRank >= 0 {
			rank, known = *rs.TPRank, true
		}
	}
	if known {
		cc.role(role).seen[rank] = true
	}
}

func (cc *CoverageCollector) role(role string) *roleRanks {
	if cc.ranks == nil {
		cc.ranks = map[string]*roleRanks{}
	}
	r := cc.ranks[role]
	if r == nil {
		r = &roleRanks{seen: map[int]bool{}}
		cc.ranks[role] = r
	}
	return r
}

// engineConfig: a run.start configuration an engine process reported about
// itself (a value with provenance "engine").
func engineConfig(c hook.RunConfig) bool {
	for _, p := range c.Provenance {
		if p == hook.ProvEngine {
			return true
		}
	}
	return false
}

// SilentRanks lists, per role, the ranks below the reported TP size that
// sent nothing: "decode rank 1 of 2 never reported". Where several nodes
// share the ranks (the report's extra.nnodes and extra.node_rank), only
// this node's slice is expected. Empty where no engine process reported its
// TP size (then a missing rank cannot be known).
func (cc *CoverageCollector) SilentRanks() []string {
	var out []string
	for _, role := range slices.Sorted(maps.Keys(cc.ranks)) {
		r := cc.ranks[role]
		if r.world <= 0 {
			continue
		}
		name := "rank"
		if role != "" {
			name = role + " rank"
		}
		for i := r.lo; i < r.hi; i++ {
			if !r.seen[i] {
				out = append(out, fmt.Sprintf("%s %d of %d never reported", name, i, r.world))
			}
		}
	}
	return out
}

// Result returns the coverage so far.
func (cc *CoverageCollector) Result() Coverage {
	c := cc.c
	c.Producers = append([]ProducerEnd(nil), c.Producers...)
	c.Counts = append([]ProducerCount(nil), c.Counts...)
	c.Silent = cc.SilentRanks()
	return c
}

// Merge adds o's producers and counts to c (several bundles judged together).
func (c *Coverage) Merge(o Coverage) {
	c.Ends += o.Ends
	c.Dropped += o.Dropped
	c.Lossy += o.Lossy
	c.Silent = append(c.Silent, o.Silent...)
	for _, p := range o.Producers {
		if len(c.Producers) < MaxCoverageProducers {
			c.Producers = append(c.Producers, p)
		}
	}
	// A producer's events may be spread over several bundles (its
	// collector restarted): held adds up, sent is its run.end's.
	at := make(map[producerKey]int, len(c.Counts))
	for i, p := range c.Counts {
		at[p.key()] = i
	}
	c.Uncounted += o.Uncounted
	for _, p := range o.Counts {
		if i, ok := at[p.key()]; ok {
			c.Counts[i].Held += p.Held
			c.Counts[i].Sent = max(c.Counts[i].Sent, p.Sent)
		} else if len(c.Counts) < MaxCoverageCounted {
			at[p.key()] = len(c.Counts)
			c.Counts = append(c.Counts, p)
		} else {
			c.Uncounted += p.Held
		}
	}
}

// Shortfalls names the producers that sent more events than the bundles
// hold: "python3 pid 7909 sent 1319 events, the bundles hold 1277 (42
// missing)". A producer whose run.end carries no sent count is not known
// to have lost anything, and is not named.
func (c Coverage) Shortfalls() []string {
	var out []string
	for _, p := range c.Counts {
		if p.Sent > p.Held {
			out = append(out, fmt.Sprintf("%s sent %d events, the bundles hold %d (%d missing)", p.Who(), p.Sent, p.Held, p.Sent-p.Held))
		}
	}
	return out
}

// NoteAnalyzers maps one note of a producer's run.end error (the
// pyhook's run_end_report joins its notes with "; ") to the analyzers whose
// evidence it says is incomplete; "" stands for every analyzer. The pyhook
// writes:
//
//	"<feature> off: <why>"  feature checksum.*, canary.*, graphdiff.* or
//	                        replay.step (the replay events, which canary
//	                        and graphdiff both read)
//	"<feature> off: not applicable: <why>"   nothing lost: the engine has
//	                        nothing the feature observes (canary.between on
//	                        DeepSeek-V4, which has no IndexKeyCache.move)
//	"<feature> on: <why>"   nothing lost: an opt-in feature is on and what
//	                        that changes (graphdiff.topk's capturer)
//	"N instrument errors"   errors in any instrument's hooks
//	"N room checksums skipped (index-K on the host)"   checksum
//	"run.end report failed: …"   unknown
//
// A note it does not know (another producer's, a changed pyhook) counts
// against every analyzer: unknown is not clean.
func NoteAnalyzers(note string) []string {
	note = strings.TrimSpace(note)
	if note == "" {
		return nil
	}
	if feature, _, ok := strings.Cut(note, " on: "); ok && !strings.Contains(feature, " ") && strings.Contains(feature, ".") {
		return nil
	}
	if feature, why, ok := strings.Cut(note, " off: "); ok && !strings.Contains(feature, " ") {
		if strings.HasPrefix(why, "not applicable: ") {
			return nil
		}
		switch inst, _, _ := strings.Cut(feature, "."); inst {
		case "checksum":
			return []string{checksum.AnalyzerName}
		case "canary":
			return []string{canary.AnalyzerName}
		case "graphdiff":
			return []string{graphdiff.AnalyzerName}
		case "replay":
			return []string{canary.AnalyzerName, graphdiff.AnalyzerName}
		}
		return []string{""}
	}
	if n, rest, ok := strings.Cut(note, " "); ok && isCount(n) {
		switch rest {
		case "room checksums skipped (index-K on the host)":
			return []string{checksum.AnalyzerName}
		case "instrument errors":
			return []string{""}
		}
	}
	return []string{""}
}

func isCount(s string) bool {
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

// Lost lists what the producers said they lost that bears on analyzer's
// verdict (checksum.AnalyzerName, canary.AnalyzerName,
// graphdiff.AnalyzerName), one line per producer, e.g. "python3 pid 7909
// (decode rank 1): canary.replay off: 3 errors …". A note (each
// "; "-separated part of a run.end error) counts when NoteAnalyzers maps it
// to the analyzer or to every analyzer ("3 instrument errors", a note it
// does not know): what it lost is unknown, so it may be this layer's. Dropped events count for every layer. Empty: nothing reported
// lost. When more producers lost evidence than a Coverage keeps, the last
// line says how many more.
func (c Coverage) Lost(analyzer string) []string {
	var out []string
	for _, s := range c.Silent {
		out = append(out, s+": what it saw is unknown")
	}
	out = append(out, c.Shortfalls()...) // missing events may be any layer's
	for _, p := range c.Producers {
		var why []string
		if p.Dropped > 0 {
			why = append(why, fmt.Sprintf("dropped %d events", p.Dropped))
		}
		if p.Error != "" {
			rel := false
			for _, part := range strings.Split(p.Error, "; ") {
				for _, a := range NoteAnalyzers(part) {
					rel = rel || a == "" || a == analyzer
				}
			}
			if rel {
				why = append(why, p.Error)
			}
		}
		if len(why) > 0 {
			out = append(out, p.Who()+": "+strings.Join(why, "; "))
		}
	}
	if n := c.Lossy - len(c.Producers); n > 0 {
		out = append(out, fmt.Sprintf("%d more producers reported losses (not listed)", n))
	} else if c.Dropped > 0 && len(out) == len(c.Silent)+len(c.Shortfalls()) {
		out = append(out, fmt.Sprintf("producers dropped %d events", c.Dropped))
	}
	return out
}

// Partial is the one-line reason a verdict over analyzer's evidence is
// partial, or "" when the producers reported nothing lost that bears on it.
func (c Coverage) Partial(analyzer string) string {
	l := c.Lost(analyzer)
	if len(l) == 0 {
		return ""
	}
	return "producers reported lost evidence: " + strings.Join(l, " | ")
}
