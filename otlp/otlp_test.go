package otlp

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/kvcanary/kvcanary/metrics"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// receiver is an OTLP/HTTP endpoint that decodes the real protobuf payloads.
type receiver struct {
	mu        sync.Mutex
	logs      []*logspb.ResourceLogs
	metrics   []*metricspb.ResourceMetrics
	logPosts  int
	failFirst int // answer this many log posts with 503
}

func (rv *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want a protobuf POST", http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rv.mu.Lock()
	defer rv.mu.Unlock()
	var req, resp proto.Message
	var keep func() // stores the decoded req
	switch r.URL.Path {
	case "/otel/v1/logs":
		rv.logPosts++
		if rv.logPosts <= rv.failFirst {
			http.Error(w, "try later", http.StatusServiceUnavailable)
			return
		}
		logs := &collogspb.ExportLogsServiceRequest{}
		req, resp = logs, &collogspb.ExportLogsServiceResponse{}
		keep = func() { rv.logs = append(rv.logs, logs.ResourceLogs...) }
	case "/otel/v1/metrics":
		metrics := &colmetricspb.ExportMetricsServiceRequest{}
		req, resp = metrics, &colmetricspb.ExportMetricsServiceResponse{}
		keep = func() { rv.metrics = append(rv.metrics, metrics.ResourceMetrics...) }
	default:
		http.NotFound(w, r)
		return
	}
	if err := proto.Unmarshal(raw, req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	keep()
	out, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = v.IntValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = v.BoolValue
		}
	}
	return m
}

func (rv *receiver) records() (recs []*logspb.LogRecord, res []map[string]any) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	for _, rl := range rv.logs {
		for _, sl := range rl.GetScopeLogs() {
			for _, lr := range sl.GetLogRecords() {
				recs = append(recs, lr)
				res = append(res, attrs(rl.GetResource().GetAttributes()))
			}
		}
	}
	return recs, res
}

var (
	finding = hook.Event{Kind: hook.KindFinding, TS: 1700000000123456789, Run: "run-7", Src: hook.Source{Node: "decode-0", Proc: "sglang", PID: 42, Role: "decode", Rank: 1},
		Body: &hook.Finding{Analyzer: "canary", Severity: hook.SevError, Summary: "LIVE-PAGE-OVERWRITE: step 9 changed page 3",
			Evidence: map[string]string{"class": "LIVE-PAGE-OVERWRITE", "page": "3", "step": "9"}}}
	session = hook.Event{Kind: hook.KindSession, TS: 1700000000223456789, Run: "run-7", Src: hook.Source{Node: "client-1"},
		Body: &hook.Session{ID: "s-12", Outcome: hook.OutcomeLeak, Rounds: 2, Round: 2, Reason: "tool-call markup <tool_call> in content"}}
)

// Findings and sessions arrive as log records with their attributes, and
// the Tally's families as OTLP metrics; every record is accounted for.
func TestExportsRecordsAndMetrics(t *testing.T) {
	rv := &receiver{}
	srv := httptest.NewServer(rv)
	defer srv.Close()
	tally := metrics.NewTally(metrics.Options{Run: "run-7"})
	s, err := New(Options{Endpoint: srv.URL + "/otel/", Tally: tally, Version: "test", MetricInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []hook.Event{finding, session, {Kind: hook.KindReplay, Body: &hook.Replay{Mode: "graph"}}} {
		tally.Publish(ev)
		s.Publish(ev)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	st := s.Stats()
	if st.Offered != 2 || st.Exported != 2 || st.Failed != 0 || st.Dropped != 0 || st.MetricExports < 1 {
		t.Fatalf("stats %+v: want 2 offered and exported, metrics exported on close", st)
	}
	recs, res := rv.records()
	if len(recs) != 2 {
		t.Fatalf("receiver got %d log records, want 2", len(recs))
	}
	f, fa := recs[0], attrs(recs[0].GetAttributes())
	if f.GetEventName() != "kvcanary.finding" || f.GetSeverityNumber() != logspb.SeverityNumber_SEVERITY_NUMBER_ERROR ||
		f.GetTimeUnixNano() != uint64(finding.TS) || f.GetBody().GetStringValue() != "LIVE-PAGE-OVERWRITE: step 9 changed page 3" {
		t.Errorf("finding record: event %q severity %v time %d body %q", f.GetEventName(), f.GetSeverityNumber(), f.GetTimeUnixNano(), f.GetBody().GetStringValue())
	}
	for k, v := range map[string]any{"kvcanary.run": "run-7", "kvcanary.host": "decode-0", "kvcanary.proc": "sglang", "kvcanary.pid": int64(42), "kvcanary.role": "decode", "kvcanary.rank": int64(1),
		"kvcanary.analyzer": "canary", "kvcanary.severity": "error", "kvcanary.evidence.class": "LIVE-PAGE-OVERWRITE", "kvcanary.evidence.page": "3"} {
		if fa[k] != v {
			t.Errorf("finding attribute %s = %#v, want %#v", k, fa[k], v)
		}
	}
	ss, sa := recs[1], attrs(recs[1].GetAttributes())
	if ss.GetEventName() != "kvcanary.session" || ss.GetSeverityNumber() != logspb.SeverityNumber_SEVERITY_NUMBER_WARN {
		t.Errorf("session record: event %q severity %v", ss.GetEventName(), ss.GetSeverityNumber())
	}
	for k, v := range map[string]any{"kvcanary.session.id": "s-12", "kvcanary.session.outcome": "leak", "kvcanary.session.corrupted": true,
		"kvcanary.session.rounds": int64(2), "kvcanary.session.bad_round": int64(2), "kvcanary.host": "client-1"} {
		if sa[k] != v {
			t.Errorf("session attribute %s = %#v, want %#v", k, sa[k], v)
		}
	}
	if res[0]["service.name"] != "kvcanary" || res[0]["service.version"] != "test" {
		t.Errorf("resource %v", res[0])
	}

	// The session counter as OTLP sees it: a cumulative monotonic sum.
	rv.mu.Lock()
	defer rv.mu.Unlock()
	found := false
	for _, rm := range rv.metrics {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				if m.GetName() != "kvcanary.sessions" {
					continue
				}
				sum := m.GetSum()
				if sum == nil || !sum.GetIsMonotonic() || sum.GetAggregationTemporality() != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE {
					t.Fatalf("kvcanary.sessions is not a cumulative monotonic sum: %v", m)
				}
				for _, dp := range sum.GetDataPoints() {
					a := attrs(dp.GetAttributes())
					if a["outcome"] == "leak" && a["run"] == "run-7" && a["host"] == "client-1" {
						found = dp.GetAsDouble() == 1
					}
				}
			}
		}
	}
	if !found {
		t.Errorf("no kvcanary.sessions point {outcome=leak, run=run-7, host=client-1} = 1 among %d resource metrics", len(rv.metrics))
	}
}

// A 503 is retried: the record arrives on the second post, nothing fails.
func TestRetriesTransientErrors(t *testing.T) {
	rv := &receiver{failFirst: 1}
	srv := httptest.NewServer(rv)
	defer srv.Close()
	s, err := New(Options{Endpoint: srv.URL + "/otel", RetryInitial: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.Publish(finding)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	recs, _ := rv.records()
	if st := s.Stats(); st.Exported != 1 || st.Failed != 0 || len(recs) != 1 || rv.logPosts != 2 {
		t.Fatalf("stats %+v, %d records in %d posts: want 1 record exported on the second post", st, len(recs), rv.logPosts)
	}
}

// An endpoint that accepts connections and never answers holds the export
// goroutine; Publish still never waits: the queue fills and the rest of a
// burst is dropped and counted, and after Close every record is accounted
// for (exported, failed or dropped).
func TestDeadEndpointNeverBlocksPublish(t *testing.T) {
	release := make(chan struct{})
	var posts sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		defer posts.Done()
		<-release
	}))
	defer srv.Close()
	defer close(release)
	const queue, batch, burst = 16, 4, 20000
	s, err := New(Options{Endpoint: srv.URL, QueueSize: queue, BatchSize: batch, FlushInterval: time.Millisecond,
		Timeout: time.Hour, RetryMax: time.Hour, CloseTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for range burst {
		s.Publish(finding)
	}
	st := s.Stats()
	// At most the queue and the batch in flight were taken while the
	// exporter hung; everything else was dropped at once.
	if st.Offered != burst || st.Dropped < burst-queue-batch || st.Exported != 0 {
		t.Fatalf("after the burst: %+v; want %d offered, at least %d dropped, none exported", st, burst, burst-queue-batch)
	}
	s.Close() // gives up after CloseTimeout; its error says so
	st = s.Stats()
	if st.Exported+st.Failed+st.Dropped != st.Offered {
		t.Fatalf("after close: %+v: exported+failed+dropped != offered", st)
	}
	s.Publish(finding)
	if got := s.Stats(); got.Dropped != st.Dropped+1 {
		t.Errorf("Publish after Close: dropped %d, want %d", got.Dropped, st.Dropped+1)
	}
}

func TestParseEndpoint(t *testing.T) {
	for _, bad := range []string{"otel:4318", "grpc://x:4317", "http://", "http://x:4318/?a=b", "::"} {
		if _, err := ParseEndpoint(bad); err == nil {
			t.Errorf("ParseEndpoint(%q) accepted", bad)
		}
	}
	u, err := ParseEndpoint("https://otel.example:4318/prefix/")
	if err != nil || u.Path != "/prefix" {
		t.Errorf("ParseEndpoint: %v, path %q", err, u.Path)
	}
}

// An export that gives up loses its records: they count as Failed and reach
// kvcanary_events_dropped_total{reason="otlp_failed"}, so the
// KvcanaryEventsDropped alert sees a dead endpoint.
func TestFailedExportsReachTheDropCounter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusBadRequest) // not retryable: the export gives up at once
	}))
	defer srv.Close()
	tally := metrics.NewTally(metrics.Options{Run: "r"})
	s, err := New(Options{Endpoint: srv.URL, Tally: tally, MetricInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.Publish(finding)
	s.Publish(finding)
	s.Close()
	if st := s.Stats(); st.Failed != 2 {
		t.Fatalf("stats %+v: want 2 failed", st)
	}
	got := -1.0
	tally.Collect(func(f *metrics.Family, v float64, labels ...string) {
		if f != metrics.FamDropped {
			return
		}
		for i, l := range labels {
			if f.Labels[i] == "reason" && l == "otlp_failed" {
				got = v
			}
		}
	})
	if got != 2 {
		t.Errorf("kvcanary_events_dropped_total{reason=otlp_failed} = %v, want 2", got)
	}
}

// Publish racing Close: every offered record ends exported, failed or
// dropped, none stranded in the queue after Close drained it.
func TestPublishRacingCloseAccountsForEveryRecord(t *testing.T) {
	rv := &receiver{}
	srv := httptest.NewServer(rv)
	defer srv.Close()
	for round := 0; round < 50; round++ {
		s, err := New(Options{Endpoint: srv.URL + "/otel", FlushInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range 200 {
					s.Publish(finding)
				}
			}()
		}
		close(start)
		s.Close()
		wg.Wait()
		if st := s.Stats(); st.Exported+st.Failed+st.Dropped != st.Offered {
			t.Fatalf("round %d: %+v: exported+failed+dropped != offered (%d stranded)", round, st, int64(st.Offered)-int64(st.Exported+st.Failed+st.Dropped))
		}
	}
}

// A Publish that passed the closed check just before Close drained the
// queue (the seam runs Close right there) still ends counted: dropped.
func TestPublishPassingTheCheckAsCloseDrainsIsCounted(t *testing.T) {
	rv := &receiver{}
	srv := httptest.NewServer(rv)
	defer srv.Close()
	s, err := New(Options{Endpoint: srv.URL + "/otel"})
	if err != nil {
		t.Fatal(err)
	}
	testPublishGap = func(s *Sink) { s.Close() }
	defer func() { testPublishGap = nil }()
	s.Publish(finding)
	testPublishGap = nil
	if st := s.Stats(); st.Offered != 1 || st.Exported+st.Failed+st.Dropped != 1 || st.Dropped != 1 {
		t.Fatalf("%+v: want the record offered during Close counted dropped", st)
	}
}
