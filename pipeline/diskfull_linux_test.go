//go:build linux

package pipeline

import (
	"context"
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kvcanary/kvcanary/internal/testenv"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// A recording that fills its disk says so while the source runs
// (OnRecordError), and its result counts as recorded only what reads back:
// Recorded + RecordLost is every event published.
func TestRecordDiskFullReportedWhileRunning(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=2m"); err != nil {
		testenv.SkipOrFail(t, "cannot mount a small tmpfs (needs root): "+err.Error())
	}
	t.Cleanup(func() { syscall.Unmount(dir, 0) })
	path := filepath.Join(dir, "full.kvtrace")
	reported := make(chan error, 1)
	p, err := New(Options{Record: path, Manifest: traces.Manifest{Tool: "test"},
		OnRecordError: func(err error) { reported <- err }})
	if err != nil {
		t.Fatal(err)
	}
	const most = 5000 // 45 MB: far past the disk unless the error is heard
	var heard error
	res := p.Run(context.Background(), SourceFunc(func(ctx context.Context, pub hook.Publisher) error {
		rng := rand.New(rand.NewChaCha8([32]byte{3}))
		for i := range most {
			raw := make([]byte, 9<<10)
			for j := range raw {
				raw[j] = byte(rng.Uint32())
			}
			pub.Publish(hook.Event{Kind: hook.KindSession, TS: int64(i + 1),
				Body: &hook.Session{ID: "s", Outcome: "error", Rounds: 1, Reason: base64.StdEncoding.EncodeToString(raw)}})
			select {
			case heard = <-reported:
				return nil
			default:
			}
		}
		return nil
	}))
	if !errors.Is(heard, syscall.ENOSPC) {
		t.Fatalf("while the source ran, OnRecordError said %v; want ENOSPC", heard)
	}
	if !errors.Is(res.RecordErr, syscall.ENOSPC) {
		t.Errorf("RecordErr %v, want ENOSPC", res.RecordErr)
	}
	n, _ := countEvents(t, path)
	t.Logf("published %d: recorded %d, lost %d, read back %d", res.Published, res.Recorded, res.RecordLost, n)
	if res.Recorded != uint64(n) || res.Recorded+res.RecordLost != res.Published || res.RecordLost == 0 || n == 0 {
		t.Errorf("published %d: recorded %d, lost %d; %d read back", res.Published, res.Recorded, res.RecordLost, n)
	}
}
