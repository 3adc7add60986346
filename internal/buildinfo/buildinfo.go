// Package buildinfo holds the tool version stamped into bundles and run.start
// events, and the commit and date the binary was built from.
//
// Release builds set all three at link time:
//
//	-ldflags "-X github.com/kvcanary/kvcanary/internal/buildinfo.Version=v1.2.3
//	          -X github.com/kvcanary/kvcanary/internal/buildinfo.Commit=<sha>
//	          -X github.com/kvcanary/kvcanary/internal/buildinfo.Date=<RFC 3339>"
//
// Without them (a plain `go build` or `go install`), each falls back to what
// the Go toolchain records in the binary (debug.ReadBuildInfo): the module
// version for `go install …@vX`, and the vcs.revision, vcs.time and
// vcs.modified settings of a build inside a git work tree. What neither
// source knows stays empty (Commit, Date) or reads "dev" (Version): never a
// made-up value.
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Version, Commit and Date are overridden at link time by release builds and
// the Makefile.
var (
	Version = ""
	Commit  = ""
	Date    = ""
)

// Info is what the binary knows about its own build.
type Info struct {
	Version string `json:"version"`
	// Commit is the full revision; empty when the build recorded none.
	Commit string `json:"commit,omitempty"`
	// Date is the commit's time (vcs.time) or the release build's date, RFC 3339.
	Date string `json:"date,omitempty"`
	// Modified: the work tree had uncommitted changes (vcs.modified). Only a
	// build from a work tree knows it; a release build says false.
	Modified bool `json:"modified,omitempty"`
}

// String returns the tool version.
func String() string { return Read().Version }

// Read returns the build's version, commit and date: link-time values first,
// then the toolchain's build info.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(Version, Commit, Date, bi)
}

// resolve is Read over explicit inputs (tests).
func resolve(version, commit, date string, bi *debug.BuildInfo) Info {
	in := Info{Version: version, Commit: commit, Date: date}
	if bi != nil {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		vcsCommit := commit == ""
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if vcsCommit {
					in.Commit = s.Value
				}
			case "vcs.time":
				if in.Date == "" {
					in.Date = s.Value
				}
			case "vcs.modified":
				if vcsCommit {
					in.Modified = s.Value == "true"
				}
			}
		}
	}
	if in.Version == "" {
		in.Version = "dev"
	}
	return in
}

// Short returns the first 12 characters of the commit (all of it when shorter).
func (in Info) Short() string {
	if len(in.Commit) > 12 {
		return in.Commit[:12]
	}
	return in.Commit
}

// Line is the one-line human form: "v1.2.3 (commit 0123456789ab, 2026-12-01T12:00:00Z)",
// with "-dirty" after a commit built from a modified tree and "commit unknown"
// when the build recorded none.
func (in Info) Line() string {
	var b strings.Builder
	b.WriteString(in.Version)
	b.WriteString(" (")
	if in.Commit == "" {
		b.WriteString("commit unknown")
	} else {
		b.WriteString("commit ")
		b.WriteString(in.Short())
		if in.Modified {
			b.WriteString("-dirty")
		}
	}
	if in.Date != "" {
		b.WriteString(", ")
		b.WriteString(in.Date)
	}
	b.WriteString(")")
	return b.String()
}
