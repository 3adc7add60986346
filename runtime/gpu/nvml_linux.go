//go:build linux && cgo

package gpu

import (
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlError keeps an nvml.Return inside the error chain and maps it onto our
// sentinels.
type nvmlError struct{ ret nvml.Return }

func (e nvmlError) Error() string { return "nvml: " + nvml.ErrorString(e.ret) }

// Unwrap exposes the nvml.Return (itself an error) to errors.As.
func (e nvmlError) Unwrap() error { return e.ret }

// Is maps NVML return codes onto the package sentinels.
func (e nvmlError) Is(target error) bool {
	switch target {
	case ErrNotSupported:
		return e.ret == nvml.ERROR_NOT_SUPPORTED || e.ret == nvml.ERROR_FUNCTION_NOT_FOUND
	case ErrPermission:
		return e.ret == nvml.ERROR_NO_PERMISSION
	case ErrNoGPU:
		return e.ret == nvml.ERROR_LIBRARY_NOT_FOUND || e.ret == nvml.ERROR_DRIVER_NOT_LOADED
	case ErrTimeout:
		return e.ret == nvml.ERROR_TIMEOUT
	}
	return false
}

// wrap returns nil for SUCCESS and an nvmlError otherwise.
func wrap(ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return nvmlError{ret}
}

// value pairs an NVML getter's value with its return code as an error, so a
// getter whose value needs no conversion is one call: value(d.GetName()).
func value[T any](v T, ret nvml.Return) (T, error) { return v, wrap(ret) }

// wrapf is wrap with what failed: nil for SUCCESS, else "what: <nvml error>".
func wrapf(ret nvml.Return, what string) error {
	if err := wrap(ret); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Open loads libnvidia-ml.so.1 and initialises NVML. On a host without the
// library it returns ErrNoGPU itself, so its message prints as is.
func Open() (Lib, error) { return open(nvml.New()) }

// OpenPath is Open with an explicit library path.
func OpenPath(path string) (Lib, error) { return open(nvml.New(nvml.WithLibraryPath(path))) }

func open(n nvml.Interface) (Lib, error) {
	switch ret := n.Init(); ret {
	case nvml.SUCCESS:
		return &nvmlLib{n: n}, nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, ErrNoGPU
	default:
		return nil, fmt.Errorf("initialize NVML: %w", wrap(ret))
	}
}

type nvmlLib struct{ n nvml.Interface }

func (l *nvmlLib) DriverVersion() (string, error) { return value(l.n.SystemGetDriverVersion()) }

func (l *nvmlLib) CUDADriverVersion() (int, error) { return value(l.n.SystemGetCudaDriverVersion()) }

func (l *nvmlLib) Devices() ([]Device, error) {
	count, ret := l.n.DeviceGetCount()
	if err := wrap(ret); err != nil {
		return nil, fmt.Errorf("count devices: %w", err)
	}
	devs := make([]Device, 0, count)
	for i := range count {
		h, ret := l.n.DeviceGetHandleByIndex(i)
		if err := wrap(ret); err != nil {
			return nil, fmt.Errorf("open GPU %d: %w", i, err)
		}
		devs = append(devs, &nvmlDevice{idx: i, d: h})
	}
	return devs, nil
}

func (l *nvmlLib) WatchXid() (XidStream, error) {
	set, ret := l.n.EventSetCreate()
	if err := wrap(ret); err != nil {
		return nil, fmt.Errorf("create NVML event set: %w", err)
	}
	devs, err := l.Devices()
	if err != nil {
		set.Free()
		return nil, err
	}
	st := &xidStream{set: set, uuids: map[int]string{}}
	registered := 0
	for _, d := range devs {
		nd := d.(*nvmlDevice)
		err := wrap(nd.d.RegisterEvents(nvml.EventTypeXidCriticalError, set))
		if errors.Is(err, ErrNotSupported) {
			continue
		}
		if err != nil {
			set.Free()
			return nil, fmt.Errorf("register GPU %d for Xid events: %w", nd.idx, err)
		}
		if u, err := nd.UUID(); err == nil {
			st.uuids[nd.idx] = u
		}
		registered++
	}
	if registered == 0 {
		set.Free()
		return nil, fmt.Errorf("register for Xid events: no device reports them: %w", ErrNotSupported)
	}
	return st, nil
}

func (l *nvmlLib) Close() error { return wrapf(l.n.Shutdown(), "shut down NVML") }

type xidStream struct {
	set   nvml.EventSet
	uuids map[int]string
}

func (s *xidStream) Next(timeout time.Duration) (Xid, error) {
	ms := uint32(timeout / time.Millisecond)
	data, ret := s.set.Wait(ms)
	if err := wrap(ret); err != nil {
		if errors.Is(err, ErrTimeout) {
			return Xid{}, ErrTimeout
		}
		return Xid{}, err
	}
	x := Xid{Device: -1, Code: data.EventData, At: time.Now()}
	if data.Device != nil {
		if idx, ret := data.Device.GetIndex(); ret == nvml.SUCCESS {
			x.Device = idx
			x.UUID = s.uuids[idx]
		}
	}
	return x, nil
}

func (s *xidStream) Close() error { return wrapf(s.set.Free(), "free NVML event set") }

type nvmlDevice struct {
	idx int
	d   nvml.Device
}

func (d *nvmlDevice) Index() int { return d.idx }

func (d *nvmlDevice) Name() (string, error) { return value(d.d.GetName()) }

func (d *nvmlDevice) UUID() (string, error) { return value(d.d.GetUUID()) }

func (d *nvmlDevice) Memory() (Memory, error) {
	m, ret := d.d.GetMemoryInfo()
	return Memory{Used: m.Used, Total: m.Total}, wrap(ret)
}

func (d *nvmlDevice) Utilization() (Utilization, error) {
	u, ret := d.d.GetUtilizationRates()
	return Utilization{GPU: u.Gpu, Mem: u.Memory}, wrap(ret)
}

func (d *nvmlDevice) TemperatureC() (uint32, error) {
	return value(d.d.GetTemperature(nvml.TEMPERATURE_GPU))
}

func (d *nvmlDevice) PowerMW() (uint32, error) { return value(d.d.GetPowerUsage()) }

func (d *nvmlDevice) Clocks() (Clocks, error) {
	sm, ret := d.d.GetClockInfo(nvml.CLOCK_SM)
	if err := wrap(ret); err != nil {
		return Clocks{}, err
	}
	mem, ret := d.d.GetClockInfo(nvml.CLOCK_MEM)
	return Clocks{SMMHz: sm, MemMHz: mem}, wrap(ret)
}

func (d *nvmlDevice) ECCVolatile() (ECC, error) {
	c, ret := d.d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC)
	if err := wrap(ret); err != nil {
		return ECC{}, err
	}
	u, ret := d.d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	return ECC{Corrected: c, Uncorrected: u}, wrap(ret)
}

func (d *nvmlDevice) PCIeReplays() (uint64, error) {
	v, ret := d.d.GetPcieReplayCounter()
	if v < 0 {
		v = 0
	}
	return uint64(v), wrap(ret)
}

func (d *nvmlDevice) RetiredPages() (uint64, error) {
	sbe, ret := d.d.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
	if err := wrap(ret); err != nil {
		return 0, err
	}
	dbe, ret := d.d.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
	return uint64(len(sbe) + len(dbe)), wrap(ret)
}

func (d *nvmlDevice) RemappedRows() (Remapped, error) {
	corr, unc, pending, failed, ret := d.d.GetRemappedRows()
	if corr < 0 {
		corr = 0
	}
	if unc < 0 {
		unc = 0
	}
	return Remapped{Corrected: uint64(corr), Uncorrected: uint64(unc), Pending: pending, Failed: failed}, wrap(ret)
}

func (d *nvmlDevice) Processes() ([]Process, error) {
	ps, ret := d.d.GetComputeRunningProcesses()
	if err := wrap(ret); err != nil {
		return nil, err
	}
	out := make([]Process, len(ps))
	for i, p := range ps {
		out[i] = Process{PID: p.Pid, MemUsed: p.UsedGpuMemory}
	}
	return out, nil
}
