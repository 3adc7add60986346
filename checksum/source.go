package checksum

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Source is one compare input. Each may be called more than once (compare
// reads an input a second time to locate mismatching pages).
type Source interface {
	Name() string
	// Each calls fn for every record of the input; the record is reused
	// between calls. It returns what it read.
	Each(fn func(*Record) error) (InputStats, error)
}

type logFile struct{ path string }

// LogFile is a text log Source (SPEC.md §6, §7).
func LogFile(path string) Source { return logFile{path} }

func (l logFile) Name() string { return l.path }

func (l logFile) Each(fn func(*Record) error) (InputStats, error) {
	st := InputStats{Name: l.path, Format: "log"}
	f, err := os.Open(l.path)
	if err != nil {
		return st, err
	}
	defer f.Close()
	st.LogStats, err = ScanLog(f, l.path, fn)
	return st, err
}

// EventStream is what a bundle reader offers (traces.Reader satisfies it):
// Next returns io.EOF after the last event.
type EventStream interface {
	Next() (hook.Event, error)
	Close() error
}

type eventSource struct {
	name string
	open func() (EventStream, error)
}

// EventSource reads room.checksum events from the streams open returns.
func EventSource(name string, open func() (EventStream, error)) Source {
	return eventSource{name, open}
}

func (s eventSource) Name() string { return s.name }

func (s eventSource) Each(fn func(*Record) error) (InputStats, error) {
	st := InputStats{Name: s.name, Format: "bundle"}
	es, err := s.open()
	if err != nil {
		return st, err
	}
	defer es.Close()
	for {
		ev, err := es.Next()
		if errors.Is(err, io.EOF) {
			return st, nil
		}
		if err != nil {
			return st, fmt.Errorf("read %s: %w", s.name, err)
		}
		st.Events++
		st.Lines = st.Events
		if ev.Kind != hook.KindRoomChecksum {
			continue
		}
		rc, ok := ev.Body.(*hook.RoomChecksum)
		if !ok || rc == nil {
			st.skip(&st.Malformed, &st.MalformedLines)
			continue
		}
		rec, err := RecordFromEvent(rc)
		if err != nil {
			st.skip(&st.Malformed, &st.MalformedLines)
			if st.FirstReason == "" {
				st.FirstReason = fmt.Sprintf("event %d: %v", st.Events, err)
			}
			continue
		}
		st.Records++
		rec.Line = st.Events
		rec.Node = ev.Src.Node
		if rec.Rank == 0 && ev.Src.Role != "" {
			rec.Rank = int(ev.Src.Rank) // the body's rank wins; else the producer's (src.rank)
		}
		if err := fn(&rec); err != nil {
			return st, err
		}
	}
}

// ErrNoRecords is returned (wrapped with the input's name) by Compare when an
// input holds no checksum records at all.
var ErrNoRecords = errors.New("no room checksum records")

// Compare reads every source, classifies every room and, when mismatching
// rooms carry page digests, reads the sources again to locate the pages.
func Compare(opts Options, srcs ...Source) (*Report, error) {
	c := NewComparer(opts)
	var stats []InputStats
	for _, src := range srcs {
		st, err := src.Each(func(r *Record) error {
			c.Add(r, src.Name())
			return nil
		})
		stats = append(stats, st)
		if err != nil {
			return nil, err
		}
		if st.Records+st.Evidence == 0 {
			if st.Bytes == 0 && st.Events == 0 {
				return nil, fmt.Errorf("%s: empty input: %w", src.Name(), ErrNoRecords)
			}
			what := fmt.Sprintf("%d lines", st.Lines)
			if st.Format != "log" {
				what = fmt.Sprintf("%d events", st.Events)
			}
			return nil, fmt.Errorf("%s: %w in %s", src.Name(), ErrNoRecords, what)
		}
	}
	rep := c.Finish()
	rep.Inputs = stats
	if c.NeedPages() {
		for _, src := range srcs {
			if _, err := src.Each(func(r *Record) error {
				c.AddPages(r)
				return nil
			}); err != nil {
				return nil, fmt.Errorf("locate mismatching pages: %w", err)
			}
		}
		c.Locate()
	}
	return rep, nil
}
