package tui

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// Defaults of the recent-event window that `s` snapshots.
const (
	DefaultWindowEvents = 65536
	DefaultWindowBytes  = 64 << 20
)

// window keeps the most recent events, bounded both in count and in an
// estimate of the memory their bodies hold (graph-vs-eager samples carry
// whole logit vectors).
type window struct {
	evs      []hook.Event
	sizes    []int
	head, n  int
	bytes    int
	maxBytes int
	evicted  uint64
}

func newWindow(events, maxBytes int) *window {
	if events <= 0 {
		events = DefaultWindowEvents
	}
	if maxBytes <= 0 {
		maxBytes = DefaultWindowBytes
	}
	return &window{evs: make([]hook.Event, events), sizes: make([]int, events), maxBytes: maxBytes}
}

func (w *window) push(ev hook.Event) {
	sz := eventSize(&ev)
	for w.n > 0 && (w.n == len(w.evs) || w.bytes+sz > w.maxBytes) {
		w.evs[w.head] = hook.Event{}
		w.bytes -= w.sizes[w.head]
		w.head = (w.head + 1) % len(w.evs)
		w.n--
		w.evicted++
	}
	if sz > w.maxBytes {
		w.evicted++
		return
	}
	i := (w.head + w.n) % len(w.evs)
	w.evs[i], w.sizes[i] = ev, sz
	w.n++
	w.bytes += sz
}

// events returns a copy of the window, oldest first.
func (w *window) events() []hook.Event {
	out := make([]hook.Event, 0, w.n)
	for i := 0; i < w.n; i++ {
		out = append(out, w.evs[(w.head+i)%len(w.evs)])
	}
	return out
}

// eventSize estimates the bytes an event keeps reachable.
func eventSize(ev *hook.Event) int {
	n := 160 + len(ev.Run) + len(ev.Src.Node) + len(ev.Src.Proc)
	switch b := ev.Body.(type) {
	case *hook.GraphDiffSample:
		n += 4*(len(b.Graph)+len(b.Eager)+len(b.Ref)+len(b.TopKGraph)+len(b.TopKEager)) + len(b.Request) + len(b.Session)
	case *hook.CanaryPages:
		n += 48*(len(b.Changed)+len(b.Collateral)) + 4*(len(b.Expected)+len(b.Transfer)+len(b.Padding)+len(b.Rewritten))
		for _, r := range b.Running {
			n += 16 + len(r)
		}
		n += 24 * len(b.ExpectedOwner)
	case *hook.RoomChecksum:
		n += 8 * len(b.PageSum)
	case *hook.GPU:
		n += 200 * len(b.Devices)
	case *hook.Finding:
		n += len(b.Summary)
		for k, v := range b.Evidence {
			n += 32 + len(k) + len(v)
		}
	case *hook.Session:
		n += len(b.Reason) + len(b.Excerpt) + 24*(len(b.Requests)+len(b.FinishReasons))
	}
	return n
}

// DefaultSnapshotDir is where `s` writes snapshots when Options.SnapshotDir
// is empty: StateDir's "snapshots". It is created on the first snapshot.
func DefaultSnapshotDir() (string, error) { return StateDir("snapshots") }

// StateDir is kvcanary's directory sub in the user's state directory:
// $XDG_STATE_HOME/kvcanary/sub, or ~/.local/state/kvcanary/sub without it
// (the XDG base directory specification's state directory: data worth
// keeping across restarts, not important enough for the user's documents).
func StateDir(sub string) (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "kvcanary", sub), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no XDG_STATE_HOME and no home directory: %w (give a directory)", err)
	}
	return filepath.Join(home, ".local", "state", "kvcanary", sub), nil
}

// SnapshotMsg reports a snapshot bundle written (or the error).
type SnapshotMsg struct {
	Path   string
	Events int
	Err    error
}

// snapshotCmd writes evs to a new bundle in dir, the dashboard's headline
// figures in the manifest's labels ("view_sessions", "view_dropped" …); the
// I/O runs in the Cmd.
func snapshotCmd(dir string, m traces.Manifest, evs []hook.Event, evicted uint64, figures map[string]string, now time.Time) tea.Cmd {
	return func() tea.Msg {
		if dir == "" {
			d, err := DefaultSnapshotDir()
			if err == nil {
				err = os.MkdirAll(d, 0o700)
			}
			if err != nil {
				return SnapshotMsg{Err: fmt.Errorf("snapshot directory: %w", err)}
			}
			dir = d
		}
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs // the status line names the file in full
		}
		path := filepath.Join(dir, "kvcanary-snapshot-"+now.UTC().Format("20060102T150405.000Z")+traces.Extension)
		m.Command = "watch snapshot"
		labels := map[string]string{}
		for k, v := range m.Labels {
			labels[k] = v
		}
		labels["snapshot"] = "recent events window"
		labels["window_evicted"] = fmt.Sprint(evicted)
		for k, v := range figures {
			labels["view_"+k] = v
		}
		m.Labels = labels
		w, err := traces.Create(path, m)
		if err != nil {
			return SnapshotMsg{Path: path, Err: fmt.Errorf("create snapshot: %w", err)}
		}
		for _, ev := range evs {
			// An invalid event is refused and counted in the footer; an
			// I/O error sticks and comes back from Close.
			_ = w.Write(ev)
		}
		if err := w.Close(); err != nil {
			return SnapshotMsg{Path: path, Err: fmt.Errorf("close snapshot %s: %w", path, err)}
		}
		return SnapshotMsg{Path: path, Events: int(w.Count())}
	}
}
