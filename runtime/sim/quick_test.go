package sim

import (
	"context"
	"os"
	"strconv"
	"testing"
)

func TestQuickRun(t *testing.T) {
	if os.Getenv("SIMQUICK") == "" {
		t.Skip("set SIMQUICK")
	}
	cfg := DefaultConfig()
	if v := os.Getenv("SEED"); v != "" {
		s, _ := strconv.Atoi(v)
		cfg.Seed = uint64(s)
	}
	if os.Getenv("INSTR") == "" {
		cfg.Instruments = Instruments{}
	}
	w := DefaultWorkload()
	res, err := Run(context.Background(), cfg, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outcomes=%v corrupted=%d dev=%d stats=%+v wall=%.1f", res.Outcomes, res.CorruptedSessions, res.Deviated, res.Stats, res.WallSeconds)
}
