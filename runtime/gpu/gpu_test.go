package gpu

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

func hookSource() hook.Source { return hook.Source{Node: "n1", Proc: "gpu"} }

// fakeDevice implements Device; errs maps a metric name to the error its getter returns.
type fakeDevice struct {
	idx  int
	errs map[string]error
}

func (d *fakeDevice) err(m string) error      { return d.errs[m] }
func (d *fakeDevice) Index() int              { return d.idx }
func (d *fakeDevice) Name() (string, error)   { return "Fake GPU", d.err("name") }
func (d *fakeDevice) UUID() (string, error)   { return "GPU-fake", d.err("uuid") }
func (d *fakeDevice) Memory() (Memory, error) { return Memory{Used: 1, Total: 2}, d.err("memory") }
func (d *fakeDevice) TemperatureC() (uint32, error) {
	return 55, d.err("temperature")
}
func (d *fakeDevice) Utilization() (Utilization, error) {
	return Utilization{GPU: 99}, d.err("utilization")
}
func (d *fakeDevice) PowerMW() (uint32, error)        { return 1000, d.err("power") }
func (d *fakeDevice) Clocks() (Clocks, error)         { return Clocks{SMMHz: 1}, d.err("clocks") }
func (d *fakeDevice) ECCVolatile() (ECC, error)       { return ECC{Uncorrected: 3}, d.err("ecc") }
func (d *fakeDevice) PCIeReplays() (uint64, error)    { return 4, d.err("pcie") }
func (d *fakeDevice) RetiredPages() (uint64, error)   { return 5, d.err("retired") }
func (d *fakeDevice) RemappedRows() (Remapped, error) { return Remapped{}, d.err("remapped") }
func (d *fakeDevice) Processes() ([]Process, error)   { return []Process{{PID: 7}}, d.err("procs") }

type fakeLib struct {
	devs    []Device
	listErr error
	xid     XidStream
}

func (l *fakeLib) DriverVersion() (string, error)  { return "1.2", nil }
func (l *fakeLib) CUDADriverVersion() (int, error) { return 12090, nil }
func (l *fakeLib) Devices() ([]Device, error)      { return l.devs, l.listErr }
func (l *fakeLib) Close() error                    { return nil }
func (l *fakeLib) WatchXid() (XidStream, error) {
	if l.xid == nil {
		return nil, ErrNotSupported
	}
	return l.xid, nil
}

// fakeXid delivers its events once each, then times out.
type fakeXid struct {
	mu     sync.Mutex
	events []Xid
	closed bool
}

func (x *fakeXid) Next(timeout time.Duration) (Xid, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.events) == 0 {
		return Xid{}, ErrTimeout
	}
	e := x.events[0]
	x.events = x.events[1:]
	return e, nil
}

func (x *fakeXid) Close() error { x.mu.Lock(); x.closed = true; x.mu.Unlock(); return nil }

func TestCollectSkipsUnsupportedAndFailsOnOthers(t *testing.T) {
	lost := errors.New("gpu is lost")
	lib := &fakeLib{devs: []Device{
		&fakeDevice{idx: 0, errs: map[string]error{"power": ErrNotSupported, "procs": ErrPermission}},
		&fakeDevice{idx: 1},
	}}
	s, err := Collect(lib, time.Unix(5, 0))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Skipped[0], "|"); got != "power: not supported|processes: permission denied" {
		t.Fatalf("skipped %q", got)
	}
	if s.Devices[0].PowerMW != 0 || s.Devices[1].PowerMW != 1000 || s.Devices[0].Procs != nil {
		t.Fatalf("unsupported values leaked: %+v", s.Devices)
	}
	if s.CUDA != 12090 || CUDAVersion(s.CUDA) != "12.9" {
		t.Fatalf("cuda %d", s.CUDA)
	}

	lib.devs[1] = &fakeDevice{idx: 1, errs: map[string]error{"ecc": lost}}
	_, err = Collect(lib, time.Now())
	if !errors.Is(err, lost) || err.Error() != "read ecc of GPU 1: gpu is lost" {
		t.Fatalf("Collect = %v", err)
	}
	lib.listErr = ErrPermission
	if _, err := Collect(lib, time.Now()); !errors.Is(err, ErrPermission) || !strings.HasPrefix(err.Error(), "list devices: ") {
		t.Fatalf("Collect = %v", err)
	}
}

func TestSamplerPublishesGPUEventsWithXid(t *testing.T) {
	xs := &fakeXid{events: []Xid{{Device: 1, Code: 48}}}
	lib := &fakeLib{devs: []Device{&fakeDevice{idx: 0}, &fakeDevice{idx: 1}}, xid: xs}
	gotXid := make(chan Xid, 1)
	s := &Sampler{Lib: lib, Interval: time.Millisecond, Src: hookSource(), OnXid: func(x Xid) { gotXid <- x }}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var evs []hook.Event
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, hook.PublishFunc(func(ev hook.Event) {
			mu.Lock()
			evs = append(evs, ev)
			n := len(evs)
			body := ev.Body.(*hook.GPU)
			mu.Unlock()
			// stop once a sample carries the Xid
			if n > 1 && body.Devices[1].Xid == 48 {
				cancel()
			}
		}))
	}()
	select {
	case x := <-gotXid:
		if x.Code != 48 || x.Device != 1 {
			t.Fatalf("OnXid %+v", x)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no Xid delivered")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sampler did not stop")
	}
	mu.Lock()
	defer mu.Unlock()
	last := evs[len(evs)-1]
	b := last.Body.(*hook.GPU)
	if last.Kind != hook.KindGPU || last.Src != hookSource() || len(b.Devices) != 2 || b.Devices[0].Xid != 0 || b.Devices[1].Xid != 48 {
		t.Fatalf("last event %+v %+v", last, b)
	}
	xs.mu.Lock()
	closed := xs.closed
	xs.mu.Unlock()
	if !closed {
		t.Fatal("Xid stream not closed after Run")
	}
}

func TestSamplerStopsOnCollectError(t *testing.T) {
	lib := &fakeLib{listErr: errors.New("boom")}
	s := &Sampler{Lib: lib, Interval: time.Millisecond}
	err := s.Run(context.Background(), hook.PublishFunc(func(hook.Event) { t.Error("published despite error") }))
	if err == nil || err.Error() != "list devices: boom" {
		t.Fatalf("Run = %v", err)
	}
}

// With an Xid stream open, a Collect error still ends Run (it once waited
// for the Xid watcher before cancelling it, and hung) and closes the stream.
func TestSamplerCollectErrorWithXidStreamReturns(t *testing.T) {
	xs := &fakeXid{}
	lib := &fakeLib{listErr: errors.New("boom"), xid: xs}
	s := &Sampler{Lib: lib, Interval: time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background(), hook.PublishFunc(func(hook.Event) {})) }()
	select {
	case err := <-done:
		if err == nil || err.Error() != "list devices: boom" {
			t.Fatalf("Run = %v, want the Collect error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after a Collect error while an Xid stream was open")
	}
	xs.mu.Lock()
	closed := xs.closed
	xs.mu.Unlock()
	if !closed {
		t.Fatal("Xid stream not closed after Run")
	}
}
