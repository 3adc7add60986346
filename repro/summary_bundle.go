package repro

import "github.com/kvcanary/kvcanary/traces"

// RunStatsFromBundle reads a trace bundle (.kvtrace) into a RunStats: the
// manifest's tool, host and configuration, then every event. A bundle cut
// short is read to its last complete frame and marked Truncated; damaged
// records are skipped and counted in Skipped. Errors name the file.
func RunStatsFromBundle(path string) (*RunStats, error) {
	br, err := traces.Open(path)
	if err != nil {
		return nil, err
	}
	defer br.Close()
	m := br.Manifest()
	r := NewRunStats(path)
	r.SetManifest(m.Tool, m.Created, m.Host, m.Config)
	if err := ReadRun(br, r); err != nil {
		return r, err // the reader's errors name the bundle and the byte offset
	}
	r.Truncated = br.Truncated()
	r.Skipped = br.Skipped()
	return r, nil
}

// RunSummaryFromBundle is RunStatsFromBundle reduced to the run's Summary.
func RunSummaryFromBundle(path string) (Summary, error) {
	r, err := RunStatsFromBundle(path)
	if err != nil {
		return Summary{}, err
	}
	return r.Summary(), nil
}
