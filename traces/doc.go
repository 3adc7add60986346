// Package traces writes and reads trace bundles (.kvtrace): one file per run
// holding the manifest (format version, tool, host, run config), every event in
// the event model v1 JSON-lines form, and a footer with per-kind counts, as a
// stream of independent zstd frames that zstdcat, jq and DuckDB read without
// kvcanary. FORMAT.md is the format's contract.
//
// The bundle writer is a lossless sink: Record drains a lossless bus
// subscription into a Writer. Writers end a frame at least once per second, so
// a killed writer loses at most the last second of events. A Writer compresses
// on a goroutine of its own and a Reader decodes one frame ahead on another,
// so both use two cores; Close them (an abandoned Reader's goroutine is
// stopped when the Reader is garbage collected).
//
// Error contract: readers never panic on any input. A file that is not a bundle
// (empty, not zstd, no manifest, a major format version this build does not
// know) is an error naming the file. Inside a bundle, damage is never fatal: a
// frame that fails to decode, bytes between frames that are not a frame, and
// lines that are not a known record are skipped and counted with their position
// (frame number, byte offset, line number); a bundle cut short is read up to its
// last complete frame and reported as truncated. Writers return the first I/O
// error on every later call and from Close.
//
// klauspost/compress enters kvcanary through this package only.
package traces
