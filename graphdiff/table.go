package graphdiff

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/kvcanary/kvcanary/internal/safetext"
)

// The summary's report parts as text, for a text sink to print: tables are
// rows of cells (header first) with untrusted strings (request and session
// ids) already quoted by safetext.Quote.

// ReasonCounts lists the divergence reasons, most frequent first (ties by
// name): "selection 2, logits 1"; "" when no sample diverged.
func (s *Summary) ReasonCounts() string {
	keys := make([]string, 0, len(s.Reasons))
	for k := range s.Reasons {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if s.Reasons[keys[i]] != s.Reasons[keys[j]] {
			return s.Reasons[keys[i]] > s.Reasons[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, s.Reasons[k])
	}
	return strings.Join(parts, ", ")
}

// WorstTable is the table of the worst samples the summary kept.
func (s *Summary) WorstTable() [][]string {
	rows := [][]string{{"STEP", "REQUEST", "SESSION", "VERDICT", "JACCARD", "RANK", "MISSING", "EXTRA", "MAX_ABS_DIFF", "REL_RMSE"}}
	for _, w := range s.Worst {
		verdict := "ok"
		if w.Divergent {
			verdict = w.Reason
		}
		sess := w.Session
		if sess == "" {
			sess = "-"
		}
		missing := strconv.Itoa(w.MissingCount)
		if w.MissingNewest {
			missing += " (newest)"
		}
		rank := "-"
		if w.FirstDiffRank >= 0 {
			rank = strconv.Itoa(w.FirstDiffRank)
		}
		rows = append(rows, []string{strconv.FormatUint(w.Step, 10), safetext.Quote(w.Request), safetext.Quote(sess), verdict,
			strconv.FormatFloat(w.TopKJaccard, 'f', 3, 64), rank, missing, strconv.Itoa(w.ExtraCount),
			FormatFloat(w.MaxAbsDiff), FormatFloat(w.RelRMSE)})
	}
	return rows
}

// FormatFloat shows a metric with four significant digits.
func FormatFloat(f float64) string { return strconv.FormatFloat(f, 'g', 4, 64) }
