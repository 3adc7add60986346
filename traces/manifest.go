package traces

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Format version this build writes and reads. A reader accepts any minor
// version of FormatMajor (unknown fields and records are skipped) and rejects
// every other major version.
const (
	FormatMajor   = 1
	FormatMinor   = 0
	FormatVersion = "1.0"
)

// Extension is the conventional file name extension of a bundle.
const Extension = ".kvtrace"

// Manifest is record 1 of a bundle: what wrote it, when, where, and with what
// run configuration. On disk it is the line {"kvtrace":{...}}.
type Manifest struct {
	FormatVersion string            `json:"format_version"` // "MAJOR.MINOR"
	Tool          string            `json:"tool"`           // writing tool and version
	Created       time.Time         `json:"created"`
	Host          hook.HostInfo     `json:"host"`
	Config        hook.RunConfig    `json:"config"`
	Run           string            `json:"run"`
	Command       string            `json:"command,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
}

// Footer is the last record of a cleanly closed bundle. On disk it is the line
// {"kvtrace_footer":{...}}.
type Footer struct {
	Events   uint64            `json:"events"`      // event records written
	Counts   map[string]uint64 `json:"counts"`      // events by kind name
	FirstTS  int64             `json:"first_ts_ns"` // smallest event ts_ns; 0 when no events
	LastTS   int64             `json:"last_ts_ns"`  // largest event ts_ns; 0 when no events
	Dropped  uint64            `json:"dropped"`     // events lost before reaching the writer (SetDropped)
	Rejected uint64            `json:"rejected,omitempty"`
	// DroppedUnknown: Dropped is a lower bound, not a count. Some events'
	// fate was never recorded (trace merge: an input without a footer, whose
	// drops are unknown). Readers of 1.0 that predate it skip it.
	DroppedUnknown bool `json:"dropped_unknown,omitempty"`
	// Labels hold what the writer learned only by the end (trace merge:
	// each input's damage, merge.N.*). Optional.
	Labels map[string]string `json:"labels,omitempty"`
	Closed time.Time         `json:"closed"`
}

// Record keys: the first (and only) key of a manifest and a footer line.
const (
	manifestKey = "kvtrace"
	footerKey   = "kvtrace_footer"
)

type manifestRecord struct {
	Manifest *Manifest `json:"kvtrace"`
}

type footerRecord struct {
	Footer *Footer `json:"kvtrace_footer"`
}

// ParseVersion splits a "MAJOR.MINOR" format version.
func ParseVersion(v string) (major, minor int, err error) {
	a, b, ok := strings.Cut(v, ".")
	if ok {
		major, err = strconv.Atoi(a)
		if err == nil {
			minor, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || major < 0 || minor < 0 {
		return 0, 0, fmt.Errorf("bad format_version %q: want MAJOR.MINOR", v)
	}
	return major, minor, nil
}

// CheckVersion reports whether this build reads bundles of format version v.
func CheckVersion(v string) error {
	major, _, err := ParseVersion(v)
	if err != nil {
		return err
	}
	switch {
	case major > FormatMajor:
		return fmt.Errorf("bundle format %s is newer than this kvcanary reads (%d.x); upgrade kvcanary", v, FormatMajor)
	case major < FormatMajor:
		return fmt.Errorf("bundle format %s is older than this kvcanary reads (%d.x); read it with an older kvcanary", v, FormatMajor)
	}
	return nil
}
