// Package report builds the shareable account of an investigation from one
// or more trace bundles: a self-contained HTML page (inline SVG plots drawn
// with gonum.org/v1/plot, no script, no network fetch, opens offline) or
// Markdown for a GitHub issue. It follows the order of the investigation:
// the headline (corruption rate with its 95% Wilson interval per run), the
// three layers' verdicts with their evidence (mismatching rooms and pages,
// overwritten pages and their victims, divergent steps with top-k Jaccard),
// A/B comparisons of every run against the first (rates, Fisher's exact p,
// confounds, from sessions.Compare), the plots, each run's settings with their
// provenance, and the exact commands that re-check each claim.
//
// Read judges a bundle afresh: every event except recorded findings goes
// through the checksum, canary and graphdiff analyzers, as the report
// commands do. What a bundle did not observe is shown as not measured, never
// as a clean result. Quoted text from the bundle (leaked outputs, reasons,
// labels) is escaped: html/template in HTML, code spans with control
// characters made visible in Markdown.
//
// A long run's plot data (scheduler observations, session ends, Jaccard
// values) is a systematic sample across the whole run, in bounded memory;
// a plot drawn from a sample says so ("N of M …"), and the totals and peaks
// are over every event.
//
// gonum.org/v1/plot enters kvcanary through this package only.
//
// Error contract: Read returns the bundle reader's errors (they name the file
// and position); a truncated or damaged bundle is reported, not refused.
// Write returns the writer's errors.
package report
