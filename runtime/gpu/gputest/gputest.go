package gputest

import (
	"sync"
	"time"

	"github.com/kvcanary/kvcanary/runtime/gpu"
)

// Device is a fake gpu.Device whose values are fields; Errs maps a metric name
// ("name", "uuid", "memory", "utilization", "temperature", "power", "clocks",
// "ecc", "pcie", "retired", "remapped", "processes") to the error its getter returns.
type Device struct {
	Idx      int
	NameV    string
	UUIDV    string
	Mem      gpu.Memory
	Util     gpu.Utilization
	Temp     uint32
	Power    uint32
	Clock    gpu.Clocks
	ECC      gpu.ECC
	Replays  uint64
	Retired  uint64
	Remapped gpu.Remapped
	Procs    []gpu.Process
	Errs     map[string]error
}

func (d *Device) Index() int                            { return d.Idx }
func (d *Device) Name() (string, error)                 { return d.NameV, d.Errs["name"] }
func (d *Device) UUID() (string, error)                 { return d.UUIDV, d.Errs["uuid"] }
func (d *Device) Memory() (gpu.Memory, error)           { return d.Mem, d.Errs["memory"] }
func (d *Device) Utilization() (gpu.Utilization, error) { return d.Util, d.Errs["utilization"] }
func (d *Device) TemperatureC() (uint32, error)         { return d.Temp, d.Errs["temperature"] }
func (d *Device) PowerMW() (uint32, error)              { return d.Power, d.Errs["power"] }
func (d *Device) Clocks() (gpu.Clocks, error)           { return d.Clock, d.Errs["clocks"] }
func (d *Device) ECCVolatile() (gpu.ECC, error)         { return d.ECC, d.Errs["ecc"] }
func (d *Device) PCIeReplays() (uint64, error)          { return d.Replays, d.Errs["pcie"] }
func (d *Device) RetiredPages() (uint64, error)         { return d.Retired, d.Errs["retired"] }
func (d *Device) RemappedRows() (gpu.Remapped, error)   { return d.Remapped, d.Errs["remapped"] }
func (d *Device) Processes() ([]gpu.Process, error)     { return d.Procs, d.Errs["processes"] }

// Lib is a fake gpu.Lib. Xids are delivered once each by the stream WatchXid
// returns; with no Xids WatchXid returns gpu.ErrNotSupported.
type Lib struct {
	Driver  string
	CUDA    int
	Devs    []*Device
	ListErr error
	Xids    []gpu.Xid

	mu     sync.Mutex
	Closed bool
}

func (l *Lib) DriverVersion() (string, error)  { return l.Driver, nil }
func (l *Lib) CUDADriverVersion() (int, error) { return l.CUDA, nil }

func (l *Lib) Devices() ([]gpu.Device, error) {
	if l.ListErr != nil {
		return nil, l.ListErr
	}
	out := make([]gpu.Device, len(l.Devs))
	for i, d := range l.Devs {
		out[i] = d
	}
	return out, nil
}

func (l *Lib) WatchXid() (gpu.XidStream, error) {
	if len(l.Xids) == 0 {
		return nil, gpu.ErrNotSupported
	}
	return &xids{events: append([]gpu.Xid(nil), l.Xids...)}, nil
}

func (l *Lib) Close() error { l.mu.Lock(); l.Closed = true; l.mu.Unlock(); return nil }

// IsClosed reports whether Close was called.
func (l *Lib) IsClosed() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.Closed }

type xids struct {
	mu     sync.Mutex
	events []gpu.Xid
}

func (x *xids) Next(timeout time.Duration) (gpu.Xid, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.events) == 0 {
		time.Sleep(min(timeout, 5*time.Millisecond))
		return gpu.Xid{}, gpu.ErrTimeout
	}
	e := x.events[0]
	x.events = x.events[1:]
	return e, nil
}

func (x *xids) Close() error { return nil }

// H200 returns a fake with n H200-like devices and distinct, index-derived values.
func H200(n int) *Lib {
	l := &Lib{Driver: "550.54.15", CUDA: 12040}
	for i := range n {
		l.Devs = append(l.Devs, &Device{
			Idx: i, NameV: "NVIDIA H200 141GB HBM3e", UUIDV: "GPU-0000000" + string(rune('0'+i%10)),
			Mem:  gpu.Memory{Used: uint64(i+1) << 30, Total: 144384 << 20},
			Util: gpu.Utilization{GPU: uint32(10 * i), Mem: uint32(5 * i)},
			Temp: uint32(40 + i), Power: uint32(300000 + 1000*i),
			Clock: gpu.Clocks{SMMHz: 1980, MemMHz: 2619},
			ECC:   gpu.ECC{Corrected: uint64(i)},
			Procs: []gpu.Process{{PID: uint32(1000 + i), MemUsed: 2 << 30}},
		})
	}
	return l
}
