package traces

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/internal/testenv"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// A bundle must be readable without kvcanary: `zstdcat FILE | jq -c .`.
func TestZstdcatJq(t *testing.T) {
	testenv.LookTool(t, "zstdcat", "apt-get install -y zstd jq")
	testenv.LookTool(t, "jq", "apt-get install -y zstd jq")
	var evs []hook.Event
	for i := 0; i < 3000; i++ {
		ev := sampleEvents()[i%len(hook.Kinds())]
		ev.TS = int64(i)
		if rs, ok := ev.Body.(*hook.RunStart); ok {
			// RunConfig.seed is a JSON number; jq keeps only 53 bits of
			// numbers, so the MaxUint64 seed of sampleEvents would not survive.
			cfg := *rs
			cfg.Config.Seed = 1<<53 - 1
			ev.Body = &cfg
		}
		evs = append(evs, ev)
	}
	l := smallBundle(t, evs, 250) // many frames
	path := filepath.Join(t.TempDir(), "run.kvtrace")
	if err := os.WriteFile(path, l.buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `zstdcat "$1" | jq -c .`, "sh", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("zstdcat | jq: %v: %s", err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) != len(evs)+2 {
		t.Fatalf("jq printed %d records, want %d events + manifest + footer", len(lines), len(evs))
	}
	if !strings.HasPrefix(lines[0], `{"kvtrace":{"format_version":"1.0"`) {
		t.Errorf("first record %s", lines[0])
	}
	var foot footerRecord
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &foot); err != nil || foot.Footer == nil || foot.Footer.Events != uint64(len(evs)) {
		t.Errorf("last record %s (%v)", lines[len(lines)-1], err)
	}
	for i, line := range lines[1 : len(lines)-1] {
		var ev hook.Event
		if err := ev.UnmarshalJSON([]byte(line)); err != nil {
			t.Fatalf("jq line %d: %v: %s", i+2, err, line)
		}
		jsonEqual(t, evs[i], ev)
	}

	// jq selects events by kind the way FORMAT.md says.
	sel := exec.Command("sh", "-c", `zstdcat "$1" | jq -c 'select(.kind == "room.checksum") | .body.bsum'`, "sh", path)
	out, err = sel.Output()
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, ev := range evs {
		if ev.Kind == hook.KindRoomChecksum {
			want++
		}
	}
	if n := strings.Count(string(out), `"0xdeadbeefcafef00d"`); n != want {
		t.Errorf("jq found %d room.checksum bsums, want %d", n, want)
	}
}

// zstd's own test mode accepts every frame of a bundle, and a truncated
// bundle is reported by zstd too (our reader reads what it can).
func TestZstdIntegrity(t *testing.T) {
	testenv.LookTool(t, "zstd", "apt-get install -y zstd jq")
	l := smallBundle(t, sampleEvents(), 2)
	path := filepath.Join(t.TempDir(), "run.kvtrace")
	if err := os.WriteFile(path, l.buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("zstd", "-t", "-q", path).CombinedOutput(); err != nil {
		t.Fatalf("zstd -t: %v: %s", err, out)
	}
}
