// Package perfetto turns a run's events into a Chrome trace-event JSON file
// (the "JSON Object Format" of the Trace Event Format document), which
// ui.perfetto.dev and chrome://tracing open.
//
// The layout of the timeline:
//
//   - one process per event source (see processOf, the one place that
//     decides it): per host, role and rank for engines ("decode rank 1 @
//     node-a"), per host, process name and id for other sources;
//   - in each process, a thread track "engine steps" with one slice per
//     replay (graph or eager, batch size, bucket), a track "findings" with an
//     instant event per finding and its evidence in args, a track "sessions"
//     with an instant per finished session (outcome, excerpt), and for the
//     CUDA calls seen by `kvcanary probe cuda` a track per stream and host
//     thread (kernel launches, graph replays, event records and waits joined
//     by flow arrows; slices on one track must nest, and one thread's calls
//     never partly overlap), a track per stream for its capture windows (B/E
//     slices; a window never ended is closed at Close at the latest time
//     seen, with args.cut), and a track per host thread for the other
//     driver calls;
//   - PD transfers per room as async slices (cat "pd", id the room): from the
//     first prefill digest to the first decode digest of the room;
//   - counter tracks: running and queued requests, KV token usage, retractions
//     (from sched events), and GPU memory and utilisation per device.
//
// Writer is a sink (hook.Publisher plus Close): it writes each event as it
// arrives, so memory stays bounded whatever the bundle's size. It writes
// synchronously to its io.Writer, so as a live sink it belongs behind a
// lossless bus subscription of its own (as the bundle recorder is). The state it
// keeps (open rooms, CUDA event flows, track names) is capped and what the
// caps drop is counted in Stats. Export reads a bundle with traces.Reader and
// publishes into a Writer, decoding only the kinds the timeline shows.
//
// Error contract: Publish never fails; the first write error is kept and
// returned by Close (and Export). A bundle cut short exports its complete
// frames; the JSON written is always closed and valid.
package perfetto
