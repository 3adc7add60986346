package pipeline

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
)

// Twin is the source that runs the embedded twin (sim run, watch --sim,
// demo): Workload on Config, its events held to Speed (event time per wall
// time; 0: as fast as it goes). Workload.Judge is the caller's (the twin
// observes, an analyzer judges). Result holds the run's result once Run
// has returned.
type Twin struct {
	Config   sim.Config
	Workload sim.Workload
	Speed    float64
	// OnProgress, when set, is called as sessions finish (for a status
	// line or a step's progress); Status reports the same counts.
	OnProgress func(finished, total int)

	Result sim.Result

	finished, total atomic.Int64
}

// Run runs the twin to its end or until ctx is cancelled.
func (t *Twin) Run(ctx context.Context, pub hook.Publisher) error {
	w := t.Workload
	t.total.Store(int64(w.Sessions))
	w.Progress = func(finished, total int) {
		t.finished.Store(int64(finished))
		t.total.Store(int64(total))
		if t.OnProgress != nil {
			t.OnProgress(finished, total)
		}
	}
	if t.Speed > 0 {
		pub = Paced(ctx, pub, t.Speed)
	}
	res, err := sim.Run(ctx, t.Config, w, pub)
	t.Result = res
	return err
}

// Status is "3/80 sessions finished".
func (t *Twin) Status() string {
	return fmt.Sprintf("%d/%d sessions finished", t.finished.Load(), t.total.Load())
}
