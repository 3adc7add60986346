package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-12-01T12:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	for _, tc := range []struct {
		name                  string
		version, commit, date string
		bi                    *debug.BuildInfo
		want                  Info
		line                  string
	}{
		{"plain go build in a work tree", "", "", "", vcs,
			Info{Version: "dev", Commit: "0123456789abcdef0123456789abcdef01234567", Date: "2026-12-01T12:00:00Z", Modified: true},
			"dev (commit 0123456789ab-dirty, 2026-12-01T12:00:00Z)"},
		{"release ldflags win over vcs", "v1.2.3", "abc", "2026-12-02T00:00:00Z", vcs,
			Info{Version: "v1.2.3", Commit: "abc", Date: "2026-12-02T00:00:00Z"},
			"v1.2.3 (commit abc, 2026-12-02T00:00:00Z)"},
		{"make build: version only", "9109f92", "", "", vcs,
			Info{Version: "9109f92", Commit: "0123456789abcdef0123456789abcdef01234567", Date: "2026-12-01T12:00:00Z", Modified: true},
			"9109f92 (commit 0123456789ab-dirty, 2026-12-01T12:00:00Z)"},
		{"go install @version (no vcs)", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}},
			Info{Version: "v0.4.0"}, "v0.4.0 (commit unknown)"},
		{"nothing known", "", "", "", nil, Info{Version: "dev"}, "dev (commit unknown)"},
	} {
		got := resolve(tc.version, tc.commit, tc.date, tc.bi)
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
		if l := got.Line(); l != tc.line {
			t.Errorf("%s: Line() = %q, want %q", tc.name, l, tc.line)
		}
	}
}
