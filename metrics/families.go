package metrics

// Type is a metric family's type.
type Type uint8

// Metric types.
const (
	Counter Type = iota // monotonic: only ever grows while the process lives
	Gauge               // may go down
)

// Family describes one metric family: its Prometheus name and help, the
// OpenTelemetry instrument name and unit the OTLP exporter uses, and its
// label names in the order Collect passes their values.
type Family struct {
	Name     string // Prometheus name (kvcanary_…_total for counters)
	OTelName string // OpenTelemetry instrument name (kvcanary.…)
	Unit     string // UCUM unit for OpenTelemetry ("{event}", "By")
	Help     string
	Type     Type
	Labels   []string
}

var (
	srcLabels = []string{"run", "host", "role", "rank"}
	runLabel  = []string{"run"}
)

func withSrc(extra ...string) []string { return append(append([]string(nil), srcLabels...), extra...) }
func withRun(extra ...string) []string { return append(append([]string(nil), runLabel...), extra...) }

// The families. Per-source families carry run, host, role and rank (the
// event's source); families judged across sources (the analyzers' summaries,
// the collector's counters) carry run only: the run id the events carry when
// they all came from one run (one run, one run id), else this kvcanary
// process's own (its --run).
var (
	FamEvents = &Family{Name: "kvcanary_events_total", OTelName: "kvcanary.events", Unit: "{event}", Type: Counter,
		Help: "Events received, by kind.", Labels: withSrc("kind")}
	FamSessions = &Family{Name: "kvcanary_sessions_total", OTelName: "kvcanary.sessions", Unit: "{session}", Type: Counter,
		Help: "Finished sessions, by outcome (leak, no_tool and error count as corrupted).", Labels: withSrc("outcome")}
	FamReplays = &Family{Name: "kvcanary_replays_total", OTelName: "kvcanary.replays", Unit: "{replay}", Type: Counter,
		Help: "Decode steps, by mode (graph replay or eager).", Labels: withSrc("mode")}
	FamGraphDiffSamples = &Family{Name: "kvcanary_graphdiff_samples_total", OTelName: "kvcanary.graphdiff.samples", Unit: "{sample}", Type: Counter,
		Help: "Graph-vs-eager samples received.", Labels: withSrc()}
	FamFindings = &Family{Name: "kvcanary_findings_total", OTelName: "kvcanary.findings", Unit: "{finding}", Type: Counter,
		Help:   "Findings published, by analyzer, severity and class, attributed to the source of the event that triggered them (analyzers cap findings per run; see kvcanary_findings_suppressed_total).",
		Labels: withSrc("analyzer", "severity", "class")}
	FamDropped = &Family{Name: "kvcanary_events_dropped_total", OTelName: "kvcanary.events.dropped", Unit: "{event}", Type: Counter,
		Help:   "Events lost, by reason: producer (reported in a producer's run.end), a sink of this process that fell behind (otlp_queue), or OTLP exports that gave up (otlp_failed).",
		Labels: withSrc("reason")}

	FamRooms = &Family{Name: "kvcanary_room_compares", OTelName: "kvcanary.room.compares", Unit: "{room}", Type: Gauge,
		Help:   "Rooms by the checksum analyzer's current verdict: match, mismatch, warmup, one_side (only one side seen yet). A gauge: a room's verdict can change as records of other ranks and stages arrive.",
		Labels: withRun("class")}
	FamRoomMismatches = &Family{Name: "kvcanary_room_mismatches_total", OTelName: "kvcanary.room.mismatches", Unit: "{room}", Type: Counter,
		Help: "Rooms whose prefill and decode index-K digests differ (outside warmups).", Labels: withRun()}
	FamCanaryPages = &Family{Name: "kvcanary_canary_pages_total", OTelName: "kvcanary.canary.pages", Unit: "{page}", Type: Counter,
		Help:   "Changed index-K pages by canary class (expected-store, benign-transfer, free-page, held-page, LIVE-PAGE-OVERWRITE), per phase (replay, between).",
		Labels: withRun("class", "phase")}
	FamLiveOverwrites = &Family{Name: "kvcanary_live_page_overwrites_total", OTelName: "kvcanary.live_page_overwrites", Unit: "{page}", Type: Counter,
		Help: "LIVE-PAGE-OVERWRITE: pages of running requests changed outside the expected writes (replay and between phases).", Labels: withRun()}
	FamMissingStores = &Family{Name: "kvcanary_canary_missing_stores_total", OTelName: "kvcanary.canary.missing_stores", Unit: "{page}", Type: Counter,
		Help: "Expected index-K stores whose page did not change.", Labels: withRun("phase")}
	FamDivergent = &Family{Name: "kvcanary_graphdiff_divergent_samples_total", OTelName: "kvcanary.graphdiff.divergent_samples", Unit: "{sample}", Type: Counter,
		Help: "Graph-vs-eager samples judged divergent (out of tolerance).", Labels: withRun()}
	FamJudgedSamples = &Family{Name: "kvcanary_graphdiff_judged_samples_total", OTelName: "kvcanary.graphdiff.judged_samples", Unit: "{sample}", Type: Counter,
		Help: "Graph-vs-eager samples the graphdiff analyzer judged.", Labels: withRun()}
	FamSuppressed = &Family{Name: "kvcanary_findings_suppressed_total", OTelName: "kvcanary.findings.suppressed", Unit: "{finding}", Type: Counter,
		Help: "Findings an analyzer counted but did not publish (over its per-run cap).", Labels: withRun("analyzer")}

	FamRejected = &Family{Name: "kvcanary_events_rejected_total", OTelName: "kvcanary.events.rejected", Unit: "{event}", Type: Counter,
		Help: "Frames or lines the collector rejected, by reason.", Labels: withRun("reason")}
	FamConnections = &Family{Name: "kvcanary_collector_connections_total", OTelName: "kvcanary.collector.connections", Unit: "{connection}", Type: Counter,
		Help: "Producer connections the collector accepted.", Labels: withRun()}
	FamConnectionsOpen = &Family{Name: "kvcanary_collector_connections_open", OTelName: "kvcanary.collector.connections.open", Unit: "{connection}", Type: Gauge,
		Help: "Producer connections open now.", Labels: withRun()}
	FamRefused = &Family{Name: "kvcanary_collector_connections_refused_total", OTelName: "kvcanary.collector.connections.refused", Unit: "{connection}", Type: Counter,
		Help: "Producer connections closed on arrival, by reason.", Labels: withRun("reason")}
	FamReceivedBytes = &Family{Name: "kvcanary_collector_received_bytes_total", OTelName: "kvcanary.collector.received", Unit: "By", Type: Counter,
		Help: "Bytes read from producers.", Labels: withRun()}

	FamOverflow = &Family{Name: "kvcanary_metrics_source_overflow_events_total", OTelName: "kvcanary.metrics.source_overflow", Unit: "{event}", Type: Counter,
		Help: "Events counted under host \"_overflow\" because more distinct sources (run, host, role, rank) were seen than the sink keeps.", Labels: nil}
)

// Families lists every family, in exposition order.
func Families() []*Family {
	return []*Family{
		FamEvents, FamSessions, FamReplays, FamGraphDiffSamples, FamFindings, FamDropped,
		FamRooms, FamRoomMismatches, FamCanaryPages, FamLiveOverwrites, FamMissingStores, FamDivergent, FamJudgedSamples, FamSuppressed,
		FamRejected, FamConnections, FamConnectionsOpen, FamRefused, FamReceivedBytes,
		FamOverflow,
	}
}
