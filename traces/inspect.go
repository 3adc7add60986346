package traces

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
)

// Summary is what `kvcanary trace inspect` reports about a bundle.
type Summary struct {
	File          string   `json:"file"`
	FormatVersion string   `json:"format_version"`
	Manifest      Manifest `json:"manifest"`
	// ManifestLost says why the manifest could not be read ("" when it
	// was): Manifest then holds nothing the bundle said.
	ManifestLost     string            `json:"manifest_lost,omitempty"`
	Events           uint64            `json:"events"`
	Counts           map[string]uint64 `json:"counts"`
	FirstTS          int64             `json:"first_ts_ns"`
	LastTS           int64             `json:"last_ts_ns"`
	SpanNS           int64             `json:"span_ns"`
	Truncated        bool              `json:"truncated"`
	TruncationReason string            `json:"truncation_reason,omitempty"`
	HasFooter        bool              `json:"has_footer"`
	Footer           *Footer           `json:"footer,omitempty"`
	FooterMismatch   string            `json:"footer_mismatch,omitempty"` // footer disagrees with the events read
	Skipped          uint64            `json:"skipped"`
	Skips            []Skip            `json:"skips,omitempty"`
	Frames           uint64            `json:"frames"`
	Bytes            int64             `json:"bytes"`      // compressed bytes read
	JSONBytes        uint64            `json:"json_bytes"` // decoded JSON-line bytes
}

// Inspect reads the whole bundle at path and summarizes it. Event envelopes
// (kind, ts_ns) are checked and counted; bodies are not decoded. A truncated
// or damaged bundle is summarized, not refused; the error is for files that
// are not bundles or cannot be read.
func Inspect(path string) (Summary, error) {
	r, err := Open(path)
	if err != nil {
		return Summary{}, err
	}
	defer r.Close()
	s, err := Summarize(r)
	s.File = path
	return s, err
}

// Summarize reads r to its end and summarizes it (see Inspect).
func Summarize(r *Reader) (Summary, error) {
	m := r.Manifest()
	s := Summary{File: r.Name(), FormatVersion: m.FormatVersion, Manifest: m, ManifestLost: r.ManifestDamage(), Counts: map[string]uint64{}}
	for {
		_, kind, ts, err := r.NextLine()
		if err == io.EOF {
			break
		}
		if err != nil {
			return s, err
		}
		if s.Events == 0 || ts < s.FirstTS {
			s.FirstTS = ts
		}
		if s.Events == 0 || ts > s.LastTS {
			s.LastTS = ts
		}
		s.Events++
		s.Counts[kind.String()]++
	}
	if s.SpanNS = s.LastTS - s.FirstTS; s.SpanNS < 0 {
		s.SpanNS = math.MaxInt64 // LastTS >= FirstTS: the subtraction overflowed
	}
	s.Truncated, s.TruncationReason = r.Truncated(), r.TruncationReason()
	s.Footer, s.HasFooter = r.Footer()
	s.Skipped, s.Skips = r.Skipped(), r.Skips()
	s.Frames, s.Bytes, s.JSONBytes = r.Frames(), r.Offset(), r.DecodedBytes()
	if f := s.Footer; f != nil {
		switch {
		case f.Events != s.Events:
			s.FooterMismatch = fmt.Sprintf("footer counts %d events, bundle holds %d", f.Events, s.Events)
		case !maps.Equal(f.Counts, s.Counts):
			for _, k := range slices.Sorted(maps.Keys(f.Counts)) {
				if f.Counts[k] != s.Counts[k] {
					s.FooterMismatch = fmt.Sprintf("footer counts %d %s events, bundle holds %d", f.Counts[k], k, s.Counts[k])
					break
				}
			}
			if s.FooterMismatch == "" {
				s.FooterMismatch = "footer and bundle count different kinds"
			}
		}
	}
	return s, nil
}
