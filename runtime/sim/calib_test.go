package sim

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestCalibrate prints the seeds' table (set SIMCALIB=configs, SEEDS=1,2,...).
func TestCalibrate(t *testing.T) {
	which := os.Getenv("SIMCALIB")
	if which == "" {
		t.Skip("set SIMCALIB")
	}
	seeds := []uint64{1, 2, 3, 4, 5}
	if v := os.Getenv("SEEDS"); v != "" {
		seeds = nil
		for _, f := range strings.Split(v, ",") {
			n, _ := strconv.Atoi(f)
			seeds = append(seeds, uint64(n))
		}
	}
	sessions := 80
	if v := os.Getenv("SESSIONS"); v != "" {
		sessions, _ = strconv.Atoi(v)
	}
	for _, tc := range tableConfigs() {
		if which != "all" && !strings.Contains(which, tc.name) {
			continue
		}
		line := fmt.Sprintf("%-14s", tc.name)
		for _, s := range seeds {
			cfg := tc.cfg()
			cfg.Seed = s
			cfg.Instruments = Instruments{}
			w := testWorkload()
			w.Sessions = sessions
			res, err := Run(context.Background(), cfg, w, nil)
			if err != nil {
				t.Fatal(err)
			}
			line += fmt.Sprintf(" | %2d/%d L%d N%d E%d pk%d rt%d u%.2f g%d/e%d %.1fs", summary(res).CorruptedSessions, res.Sessions, res.Outcomes["leak"], res.Outcomes["no_tool"], res.Outcomes["error"],
				res.Stats.PeakRunningReq, res.Stats.Retractions, res.Stats.PeakTokenUsage, res.Stats.GraphReplays, res.Stats.EagerSteps, res.WallSeconds)
		}
		t.Log(line)
	}
}
