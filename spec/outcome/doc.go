// Package outcome is the session-outcome spec every session source and the
// sessions analyzer share: the outcome classes (Class: done, maxrounds,
// leak, no_tool, error, timeout; leak, no_tool and error are corrupted), the
// round-by-round rules a source applies to decide a session's outcome
// (Classifier, Round, DefaultLeakMarkers, HasLoop), per-class counts
// (Counts) and the Summary contract of `sim run --json`, `repro --json` and
// each side of `ab --json`: the corruption rate with its 95% Wilson interval.
//
// A session's outcome is an observation (DESIGN: sources observe a session
// outcome), so the rules that decide it are spec, not judgement: the repro
// harness and the twin classify with the same Classifier. Comparing runs
// (Fisher's test, A/B, confounds) is the sessions analyzer's job.
//
// It is a spec leaf: no kvcanary imports. Nothing here panics; Wilson on an
// empty run returns [0, 1]; ParseClass names the text it refused.
package outcome
