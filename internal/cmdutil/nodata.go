package cmdutil

import (
	"fmt"
	"io"
)

// StatusNoData is the "status" a report's --json carries when it has no data.
const StatusNoData = "no-data"

// Instrument is what an analyzer command judges, and so what it needs a
// source to have observed.
type Instrument string

// The instruments whose reports share the no-data contract.
const (
	InstrumentChecksum  Instrument = "checksum"
	InstrumentCanary    Instrument = "canary"
	InstrumentGraphDiff Instrument = "graphdiff"
)

// noDataSources says, per instrument, which observations it judges and
// what produces them: the SGLang hooks (`kvcanary wrap`), the twin, and the
// engine's own log lines where the engine has any.
var noDataSources = map[Instrument]struct{ what, from string }{
	InstrumentChecksum: {"room.checksum events or room_checksum lines",
		"record them with `kvcanary wrap` (the SGLang hooks, instrument checksum) or `kvcanary sim run --record` (the twin), or pass the engine logs holding `kvcanary room_checksum` lines"},
	InstrumentCanary: {"canary.pages events or kv_canary violation lines",
		"record them with `kvcanary wrap` (the SGLang hooks, instrument canary) or `kvcanary sim run --record` (the twin), or pass an SGLang server log run with `--kv-canary log`"},
	InstrumentGraphDiff: {"graphdiff.sample events",
		"record them with `kvcanary wrap` (the SGLang hooks, instrument graphdiff) or `kvcanary sim run --record` (the twin); no engine log line carries them"},
}

// NoData is the report of an analyzer command whose input holds nothing it
// judges; its --json is this object.
type NoData struct {
	Status     string     `json:"status"` // StatusNoData
	Instrument Instrument `json:"instrument"`
	Input      string     `json:"input"`
	// Read counts what the input held: events of a bundle, lines of a log.
	Read uint64 `json:"read"`
	Unit string `json:"unit"` // "events" | "lines"
	// Message is the one sentence the text report prints.
	Message string `json:"message"`
	// Detail says more when the input tells more (e.g. the run's settings).
	Detail string `json:"detail,omitempty"`
}

// NewNoData builds the no-data report of inst over input, which held read
// units ("event" or "line").
func NewNoData(inst Instrument, input string, read uint64, unit string) *NoData {
	src, ok := noDataSources[inst]
	if !ok {
		panic(fmt.Sprintf("cmdutil: no-data sources of instrument %q not defined", inst))
	}
	units := unit + "s"
	if read == 1 {
		units = unit
	}
	return &NoData{
		Status: StatusNoData, Instrument: inst, Input: input, Read: read, Unit: unit + "s",
		Message: fmt.Sprintf("no data: %s holds no %s (%s %s read): %s",
			Quote(input), src.what, Commas(read), units, src.from),
	}
}

// Write prints the report: the JSON object, or the sentence (and the detail
// on its own line) as text.
func (n *NoData) Write(w io.Writer, asJSON bool) error {
	if asJSON {
		return WriteJSON(w, n)
	}
	if _, err := fmt.Fprintln(w, n.Message); err != nil {
		return err
	}
	if n.Detail != "" {
		_, err := fmt.Fprintln(w, Quote(n.Detail))
		return err
	}
	return nil
}

// Err is the error a command returns after writing the report: a silent
// exit with ExitNoData.
func (n *NoData) Err() error { return &ExitError{Code: ExitNoData} }
