package demo

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// The demo writes report.html and timeline.json beside its bundles and
// names them in its report; the timeline reads back as trace-event JSON with
// one step slice per replay of the baseline.
func TestDemoWritesPictures(t *testing.T) {
	out := t.TempDir()
	tg := DefaultToggles()[3:]
	rep, err := Run(context.Background(), Options{Sessions: 6, Rounds: 1, Seed: 2, Out: out, Toggles: tg, Parallel: 1, Tool: "test", Pictures: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pictures.Report != out+"/report.html" || rep.Pictures.Timeline != out+"/timeline.json" {
		t.Fatalf("pictures %+v", rep.Pictures)
	}
	html, err := os.ReadFile(rep.Pictures.Report)
	if err != nil || !strings.Contains(string(html), `id="verdict-compute"`) || strings.Count(string(html), "<svg") == 0 {
		t.Fatalf("report.html: %v, %d bytes", err, len(html))
	}
	raw, err := os.ReadFile(rep.Pictures.Timeline)
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		TraceEvents []struct {
			Ph  string `json:"ph"`
			Cat string `json:"cat"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(raw, &tf); err != nil {
		t.Fatalf("timeline.json: %v", err)
	}
	steps := 0
	for _, e := range tf.TraceEvents {
		if e.Ph == "X" && e.Cat == "step" {
			steps++
		}
	}
	if steps == 0 || uint64(steps) != rep.Evidence.Replays {
		t.Errorf("timeline: %d step slices, baseline replays %d", steps, rep.Evidence.Replays)
	}
}

// When the bundles are removed after the run (a temporary directory without
// --keep), the kept report.html says so and how to keep them, and names no
// bundle in a command.
func TestDemoPicturesBundlesRemoved(t *testing.T) {
	out := t.TempDir()
	tg := DefaultToggles()[3:]
	rep, err := Run(context.Background(), Options{Sessions: 6, Rounds: 1, Seed: 2, Out: out, Toggles: tg, Parallel: 1, Tool: "test", Pictures: true, BundlesRemoved: true})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(rep.Pictures.Report)
	if err != nil {
		t.Fatal(err)
	}
	html := string(raw)
	i := strings.Index(html, `id="commands"`)
	if i < 0 {
		t.Fatal("report.html has no re-check section")
	}
	sec := html[i:]
	for _, want := range []string{"removed when the demo ended", "kvcanary demo --out DIR", "kvcanary demo --keep"} {
		if !strings.Contains(sec, want) {
			t.Errorf("re-check section lacks %q:\n%s", want, sec)
		}
	}
	if strings.Contains(sec, out) || strings.Contains(sec, "kvcanary checksum compare") {
		t.Errorf("re-check section names the removed bundles:\n%s", sec)
	}
}
