package main

import (
	"context"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/sessions"
)

// runStatsFromBundle reads a trace bundle (.kvtrace) into a sessions.RunStats:
// the manifest's tool, host and configuration, then every event. A bundle
// cut short is read to its last complete frame and marked Truncated; damaged
// records are skipped and counted in Skipped. Errors name the file. (It
// lives with the CLI: repro judges events and does not read bundles.)
func runStatsFromBundle(path string) (*sessions.RunStats, error) {
	return runStatsFromBundleCtx(context.Background(), path)
}

// runStatsFromBundleCtx is runStatsFromBundle cancelled by ctx: opening a
// FIFO with no writer yet, and every read, end when ctx is done (SIGINT,
// SIGTERM), as for the other readers.
func runStatsFromBundleCtx(ctx context.Context, path string) (*sessions.RunStats, error) {
	br, err := openBundle(ctx, path)
	if err != nil {
		return nil, err
	}
	defer br.Close()
	m := br.Manifest()
	r := sessions.NewRunStats(path)
	r.SetManifest(m.Tool, m.Created, m.Host, m.Config)
	if err := sessions.ReadRun(br, r); err != nil {
		return r, err // the reader's errors name the bundle and the byte offset
	}
	r.Truncated, r.TruncationReason = br.Truncated(), br.TruncationReason()
	r.Skipped = br.Skipped()
	if f, ok := br.Footer(); ok {
		r.HaveFooter, r.FooterEvents, r.Dropped = true, f.Events, f.Dropped
	}
	if err := r.CheckSessionIDs(); err != nil {
		return r, cmdutil.InputError(err)
	}
	return r, nil
}
