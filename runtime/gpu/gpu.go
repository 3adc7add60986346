package gpu

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Sentinels for absent capability, matched with errors.Is.
var (
	// ErrNoGPU means there is no NVML library (no NVIDIA driver) on this host.
	ErrNoGPU = errors.New("NVML not found (libnvidia-ml.so.1): no NVIDIA driver on this host")
	// ErrNotSupported means the device, driver or this build cannot provide what was asked.
	ErrNotSupported = errors.New("not supported")
	// ErrPermission means NVML refused the query for lack of privilege.
	ErrPermission = errors.New("permission denied")
	// ErrTimeout is returned by XidStream.Next when no event arrived in time.
	ErrTimeout = errors.New("no event before the timeout")
)

// Lib is an initialised NVML session.
type Lib interface {
	DriverVersion() (string, error)
	CUDADriverVersion() (int, error) // e.g. 12040 for CUDA 12.4
	Devices() ([]Device, error)
	// WatchXid registers every device for Xid critical errors. Devices that
	// cannot report them are skipped; ErrNotSupported when none can.
	WatchXid() (XidStream, error)
	Close() error
}

// Device is one GPU. Each getter returns an error matching ErrNotSupported when
// the device cannot report that metric.
type Device interface {
	Index() int
	Name() (string, error)
	UUID() (string, error)
	Memory() (Memory, error)
	Utilization() (Utilization, error)
	TemperatureC() (uint32, error)
	PowerMW() (uint32, error)
	Clocks() (Clocks, error)
	ECCVolatile() (ECC, error)
	PCIeReplays() (uint64, error)
	RetiredPages() (uint64, error)
	RemappedRows() (Remapped, error)
	Processes() ([]Process, error)
}

// Memory is device memory in bytes.
type Memory struct{ Used, Total uint64 }

// Utilization is percent busy over NVML's last sample period.
type Utilization struct{ GPU, Mem uint32 }

// Clocks are current clocks in MHz.
type Clocks struct{ SMMHz, MemMHz uint32 }

// ECC holds volatile (since driver load) error counts.
type ECC struct{ Corrected, Uncorrected uint64 }

// Remapped is the row-remapping state (Ampere and later).
type Remapped struct {
	Corrected, Uncorrected uint64
	Pending, Failed        bool
}

// Process is a compute process on a device.
type Process struct {
	PID     uint32
	MemUsed uint64 // bytes
}

// Xid is one Xid critical error reported by the driver.
type Xid struct {
	Device int
	UUID   string
	Code   uint64
	At     time.Time
}

// XidStream delivers Xid events.
type XidStream interface {
	// Next waits up to timeout; ErrTimeout when nothing arrived.
	Next(timeout time.Duration) (Xid, error)
	Close() error
}

// Sample is one reading of every device.
type Sample struct {
	At      time.Time
	Driver  string
	CUDA    int
	Devices []hook.GPUDevice
	// Skipped lists, per device index, the metrics NVML said were unsupported
	// or forbidden ("power: not supported").
	Skipped map[int][]string
}

// CUDAVersion formats NVML's integer CUDA driver version (12040 → "12.4").
func CUDAVersion(v int) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
}

// skippable reports whether err only means "this value is not available".
func skippable(err error) bool {
	return errors.Is(err, ErrNotSupported) || errors.Is(err, ErrPermission)
}

// Collect reads every device once. Unsupported or forbidden metrics are left
// zero and listed in Sample.Skipped; any other error fails the collection.
func Collect(lib Lib, now time.Time) (*Sample, error) {
	s := &Sample{At: now, Skipped: map[int][]string{}}
	var err error
	if s.Driver, err = lib.DriverVersion(); err != nil && !skippable(err) {
		return nil, fmt.Errorf("read driver version: %w", err)
	}
	if s.CUDA, err = lib.CUDADriverVersion(); err != nil && !skippable(err) {
		return nil, fmt.Errorf("read CUDA driver version: %w", err)
	}
	devs, err := lib.Devices()
	if err != nil {
		return nil, fmt.Errorf("list devices: %w", err)
	}
	for _, d := range devs {
		g, skipped, err := readDevice(d)
		if err != nil {
			return nil, err
		}
		if len(skipped) > 0 {
			s.Skipped[g.Index] = skipped
		}
		s.Devices = append(s.Devices, g)
	}
	return s, nil
}

func readDevice(d Device) (hook.GPUDevice, []string, error) {
	g := hook.GPUDevice{Index: d.Index()}
	var skipped []string
	var fatal error
	// ok reports whether a getter's value is usable; it records a skippable
	// error in skipped and keeps the first other error in fatal.
	ok := func(metric string, err error) bool {
		switch {
		case err == nil:
			return true
		case errors.Is(err, ErrPermission):
			skipped = append(skipped, metric+": permission denied")
		case errors.Is(err, ErrNotSupported):
			skipped = append(skipped, metric+": not supported")
		case fatal == nil:
			fatal = fmt.Errorf("read %s of GPU %d: %w", metric, g.Index, err)
		}
		return false
	}
	if v, err := d.Name(); ok("name", err) {
		g.Name = v
	}
	if v, err := d.UUID(); ok("uuid", err) {
		g.UUID = v
	}
	if v, err := d.Memory(); ok("memory", err) {
		g.MemUsed, g.MemTotal = v.Used, v.Total
	}
	if v, err := d.Utilization(); ok("utilization", err) {
		g.UtilGPU, g.UtilMem = v.GPU, v.Mem
	}
	if v, err := d.TemperatureC(); ok("temperature", err) {
		g.TempC = v
	}
	if v, err := d.PowerMW(); ok("power", err) {
		g.PowerMW = v
	}
	if v, err := d.Clocks(); ok("clocks", err) {
		g.SMClockMHz, g.MemClockMHz = v.SMMHz, v.MemMHz
	}
	if v, err := d.ECCVolatile(); ok("ecc", err) {
		g.ECCSBE, g.ECCDBE = v.Corrected, v.Uncorrected
	}
	if v, err := d.PCIeReplays(); ok("pcie replay counter", err) {
		g.PCIeReplay = v
	}
	if v, err := d.RetiredPages(); ok("retired pages", err) {
		g.RetiredPages = v
	}
	if v, err := d.RemappedRows(); ok("remapped rows", err) {
		g.RemappedCorr, g.RemappedUnc, g.RemapPending = v.Corrected, v.Uncorrected, v.Pending
	}
	if v, err := d.Processes(); ok("processes", err) {
		for _, p := range v {
			g.Procs = append(g.Procs, hook.GPUProc{PID: p.PID, MemUsed: p.MemUsed})
		}
		sort.Slice(g.Procs, func(i, j int) bool { return g.Procs[i].PID < g.Procs[j].PID })
	}
	if fatal != nil {
		return g, nil, fatal
	}
	return g, skipped, nil
}

// Event wraps a sample as a hook.KindGPU event.
func (s *Sample) Event(src hook.Source) hook.Event {
	devs := make([]hook.GPUDevice, len(s.Devices))
	copy(devs, s.Devices)
	return hook.Event{
		Kind: hook.KindGPU, TS: s.At.UnixNano(), Src: src,
		Body: &hook.GPU{Devices: devs, Driver: s.Driver, CUDA: s.CUDA},
	}
}

// Sampler publishes a hook.KindGPU event every Interval, with the last Xid
// seen on each device filled in when the library can report Xids.
type Sampler struct {
	Lib      Lib
	Interval time.Duration    // default 1s
	Now      func() time.Time // default time.Now
	Src      hook.Source
	// OnXid, when set, is called for every Xid as it arrives (from another goroutine).
	OnXid func(Xid)

	mu      sync.Mutex
	lastXid map[int]uint64
}

// Run samples until ctx is done. It returns nil on cancellation and the first
// collection error otherwise.
func (s *Sampler) Run(ctx context.Context, pub hook.Publisher) error {
	interval := s.Interval
	if interval <= 0 {
		interval = time.Second
	}
	now := s.Now
	if now == nil {
		now = time.Now
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// Stop the Xid watcher before waiting for it: on a Collect error ctx is
	// still live, and waiting first hung Run (and `gpu --watch`) forever.
	defer func() { cancel(); wg.Wait() }()
	if st, err := s.Lib.WatchXid(); err == nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer st.Close()
			_ = WatchXid(ctx, st, func(x Xid) {
				s.mu.Lock()
				if s.lastXid == nil {
					s.lastXid = map[int]uint64{}
				}
				s.lastXid[x.Device] = x.Code
				s.mu.Unlock()
				if s.OnXid != nil {
					s.OnXid(x)
				}
			})
		}()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		smp, err := Collect(s.Lib, now())
		if err != nil {
			return err
		}
		s.mu.Lock()
		for i := range smp.Devices {
			smp.Devices[i].Xid = s.lastXid[smp.Devices[i].Index]
		}
		s.mu.Unlock()
		pub.Publish(smp.Event(s.Src))
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// WatchXid calls fn for every Xid from st until ctx is done (nil) or the stream
// fails (the error).
func WatchXid(ctx context.Context, st XidStream, fn func(Xid)) error {
	const poll = 200 * time.Millisecond
	for ctx.Err() == nil {
		x, err := st.Next(poll)
		if errors.Is(err, ErrTimeout) {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for Xid events: %w", err)
		}
		fn(x)
	}
	return nil
}
