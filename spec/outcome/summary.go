package outcome

import (
	"fmt"
	"time"
)

// Counts counts sessions per outcome class. Its JSON form is the
// "outcomes" object of the Summary contract.
type Counts struct {
	Done      int `json:"done"`
	MaxRounds int `json:"maxrounds"`
	Leak      int `json:"leak"`
	NoTool    int `json:"no_tool"`
	Error     int `json:"error"`
	Timeout   int `json:"timeout"`
}

// Add counts one session of class c (a session event's outcome field). It
// reports false, counting nothing, for an unknown class.
func (o *Counts) Add(c string) bool {
	switch Class(c) {
	case Done:
		o.Done++
	case MaxRounds:
		o.MaxRounds++
	case Leak:
		o.Leak++
	case NoTool:
		o.NoTool++
	case Error:
		o.Error++
	case Timeout:
		o.Timeout++
	default:
		return false
	}
	return true
}

// Get returns the count of one class (0 for an unknown class).
func (o Counts) Get(c string) int {
	switch Class(c) {
	case Done:
		return o.Done
	case MaxRounds:
		return o.MaxRounds
	case Leak:
		return o.Leak
	case NoTool:
		return o.NoTool
	case Error:
		return o.Error
	case Timeout:
		return o.Timeout
	}
	return 0
}

// Total is the number of sessions counted.
func (o Counts) Total() int {
	return o.Done + o.MaxRounds + o.Leak + o.NoTool + o.Error + o.Timeout
}

// Corrupted is the number of corrupted sessions: leak + no_tool + error.
func (o Counts) Corrupted() int { return o.Leak + o.NoTool + o.Error }

// OKish is the seeds' "ok-ish" count, printed as "intact": done +
// maxrounds, the sessions whose every reply came back well-formed.
func (o Counts) OKish() int { return o.Done + o.MaxRounds }

// IsCorrupted reports whether an outcome class counts as corrupted: leak,
// no_tool or error.
// It takes a Class or the string of a session's outcome field.
func IsCorrupted[S ~string](c S) bool {
	switch Class(c) {
	case Leak, NoTool, Error:
		return true
	}
	return false
}

// Summary is the shared JSON shape of `sim run --json`, `repro --json` and
// each side of `ab --json`. Commands embed it (anonymous struct embedding
// keeps the keys at the top level) and add their own sections.
type Summary struct {
	Sessions          int        `json:"sessions"`
	Rounds            int        `json:"rounds"` // rounds per session the run was configured for
	Outcomes          Counts     `json:"outcomes"`
	CorruptedSessions int        `json:"corrupted_sessions"` // leak + no_tool + error
	CorruptionRate    float64    `json:"corruption_rate"`    // corrupted / sessions; 0 when there are none
	Wilson95          [2]float64 `json:"wilson95"`           // 95% Wilson interval of the rate
	WallSeconds       float64    `json:"wall_seconds"`
}

// SummaryOf derives a Summary from outcome counts, the configured rounds per
// session and the run's wall time.
func SummaryOf(o Counts, rounds int, wall time.Duration) Summary {
	n := o.Total()
	k := o.Corrupted()
	s := Summary{Sessions: n, Rounds: rounds, Outcomes: o, CorruptedSessions: k, WallSeconds: wall.Seconds()}
	if n > 0 {
		s.CorruptionRate = float64(k) / float64(n)
	}
	s.Wilson95[0], s.Wilson95[1] = Wilson(k, n, Z95)
	return s
}

// Headline is the seeds' one-line verdict followed by the 95% Wilson interval:
//
//	CORRUPTION sessions: 14/80 = 18% (leak=14 no_tool=0 error=0 intact[done/maxrounds]=66) 95% CI [10.7%, 27.3%]
//
// The percentage is rounded half up, as the seeds print it. Timeouts, which
// are neither corrupted nor intact, are shown only when there are some.
func (s Summary) Headline() string {
	o := s.Outcomes
	pct := 0
	if s.Sessions > 0 {
		pct = (200*s.CorruptedSessions + s.Sessions) / (2 * s.Sessions)
	}
	timeout := ""
	if o.Timeout > 0 {
		timeout = fmt.Sprintf(" timeout=%d", o.Timeout)
	}
	return fmt.Sprintf("CORRUPTION sessions: %d/%d = %d%% (leak=%d no_tool=%d error=%d%s intact[done/maxrounds]=%d) 95%% CI [%.1f%%, %.1f%%]",
		s.CorruptedSessions, s.Sessions, pct, o.Leak, o.NoTool, o.Error, timeout, o.OKish(),
		100*s.Wilson95[0], 100*s.Wilson95[1])
}
