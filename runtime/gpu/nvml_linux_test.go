//go:build linux && cgo

package gpu

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// h200 returns a DGX H200 fake (8 devices) whose telemetry getters return
// values derived from the device index, so every field can be checked.
func h200(t *testing.T) *server.Server {
	t.Helper()
	s := dgxh200.New()
	for i, dev := range s.Devices {
		d := dev.(*server.Device)
		i := uint32(i)
		d.MemoryInfo.Used = uint64(i+1) << 30
		d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return d.MemoryInfo, nvml.SUCCESS }
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: 10 * i, Memory: 5 * i}, nvml.SUCCESS
		}
		d.GetTemperatureFunc = func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
			if s != nvml.TEMPERATURE_GPU {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return 40 + i, nvml.SUCCESS
		}
		d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 300000 + i, nvml.SUCCESS }
		d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
			switch c {
			case nvml.CLOCK_SM:
				return 1980, nvml.SUCCESS
			case nvml.CLOCK_MEM:
				return 2619, nvml.SUCCESS
			}
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		d.GetTotalEccErrorsFunc = func(typ nvml.MemoryErrorType, ctr nvml.EccCounterType) (uint64, nvml.Return) {
			if ctr != nvml.VOLATILE_ECC {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			if typ == nvml.MEMORY_ERROR_TYPE_CORRECTED {
				return uint64(i), nvml.SUCCESS
			}
			return 0, nvml.SUCCESS
		}
		d.GetPcieReplayCounterFunc = func() (int, nvml.Return) { return int(i) * 2, nvml.SUCCESS }
		d.GetRetiredPagesFunc = func(nvml.PageRetirementCause) ([]uint64, nvml.Return) {
			return nil, nvml.ERROR_NOT_SUPPORTED // Hopper remaps rows instead
		}
		d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
			return int(i), 0, i == 7, false, nvml.SUCCESS
		}
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 2000 + i, UsedGpuMemory: 1 << 30}, {Pid: 1000 + i, UsedGpuMemory: 2 << 30}}, nvml.SUCCESS
		}
	}
	return s
}

func TestOpenWithoutLibraryIsErrNoGPU(t *testing.T) {
	_, err := OpenPath("/nonexistent/libnvidia-ml.so.1")
	if !errors.Is(err, ErrNoGPU) {
		t.Fatalf("OpenPath(missing) = %v, want ErrNoGPU", err)
	}
	const want = "NVML not found (libnvidia-ml.so.1): no NVIDIA driver on this host"
	if err.Error() != want {
		t.Fatalf("message %q, want %q", err.Error(), want)
	}
}

func TestCollectDGXH200(t *testing.T) {
	lib, err := open(h200(t))
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	now := time.Unix(1700000000, 0)
	s, err := Collect(lib, now)
	if err != nil {
		t.Fatal(err)
	}
	if s.Driver != "550.54.15" || s.CUDA != 12040 || CUDAVersion(s.CUDA) != "12.4" {
		t.Fatalf("driver %q cuda %d", s.Driver, s.CUDA)
	}
	if len(s.Devices) != 8 {
		t.Fatalf("%d devices, want 8", len(s.Devices))
	}
	seen := map[string]bool{}
	for i, d := range s.Devices {
		if d.Index != i || d.Name != "NVIDIA H200 141GB HBM3e" || !strings.HasPrefix(d.UUID, "GPU-") {
			t.Fatalf("device %d: %+v", i, d)
		}
		seen[d.UUID] = true
		if d.MemTotal != 144384<<20 || d.MemUsed != uint64(i+1)<<30 {
			t.Errorf("device %d memory %d/%d", i, d.MemUsed, d.MemTotal)
		}
		if d.UtilGPU != uint32(10*i) || d.UtilMem != uint32(5*i) || d.TempC != uint32(40+i) || d.PowerMW != uint32(300000+i) {
			t.Errorf("device %d util/temp/power %+v", i, d)
		}
		if d.SMClockMHz != 1980 || d.MemClockMHz != 2619 || d.ECCSBE != uint64(i) || d.ECCDBE != 0 || d.PCIeReplay != uint64(2*i) {
			t.Errorf("device %d clocks/ecc/pcie %+v", i, d)
		}
		if d.RemappedCorr != uint64(i) || d.RemapPending != (i == 7) {
			t.Errorf("device %d remap %+v", i, d)
		}
		if len(d.Procs) != 2 || d.Procs[0].PID != uint32(1000+i) || d.Procs[0].MemUsed != 2<<30 {
			t.Errorf("device %d procs %+v (want sorted by pid)", i, d.Procs)
		}
		if got := s.Skipped[i]; len(got) != 1 || got[0] != "retired pages: not supported" {
			t.Errorf("device %d skipped %v", i, got)
		}
	}
	if len(seen) != 8 {
		t.Fatalf("UUIDs not distinct: %v", seen)
	}
	ev := s.Event(hookSource())
	if ev.TS != now.UnixNano() || ev.Kind.String() != "gpu" {
		t.Fatalf("event %+v", ev)
	}
}

func TestNVMLErrorsKeepReturnAndMapSentinels(t *testing.T) {
	srv := h200(t)
	d3 := srv.Devices[3].(*server.Device)
	d3.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
	lib, err := open(srv)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Collect(lib, time.Now())
	var ret nvml.Return
	if !errors.As(err, &ret) || ret != nvml.ERROR_GPU_IS_LOST {
		t.Fatalf("Collect = %v, want an nvml.Return GPU_IS_LOST in the chain", err)
	}
	if !strings.Contains(err.Error(), "read temperature of GPU 3") {
		t.Fatalf("error %q does not name metric and device", err)
	}
	if errors.Is(err, ErrNotSupported) || errors.Is(err, ErrPermission) {
		t.Fatalf("GPU_IS_LOST matched a capability sentinel: %v", err)
	}

	d3.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_NO_PERMISSION }
	s, err := Collect(lib, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Skipped[3], ","); got != "temperature: permission denied,retired pages: not supported" {
		t.Fatalf("skipped %q", got)
	}
	if err := wrap(nvml.ERROR_NO_PERMISSION); !errors.Is(err, ErrPermission) {
		t.Fatalf("NO_PERMISSION does not match ErrPermission")
	}
	if err := wrap(nvml.ERROR_FUNCTION_NOT_FOUND); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("FUNCTION_NOT_FOUND does not match ErrNotSupported")
	}
}

func TestInitFailureWrapsReturn(t *testing.T) {
	srv := h200(t)
	srv.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }
	_, err := open(srv)
	var ret nvml.Return
	if !errors.Is(err, ErrNoGPU) || !errors.As(err, &ret) || ret != nvml.ERROR_DRIVER_NOT_LOADED {
		t.Fatalf("open = %v", err)
	}
	if !strings.HasPrefix(err.Error(), "initialize NVML: ") {
		t.Fatalf("error %q", err)
	}
}

func TestXidStreamFromEventSet(t *testing.T) {
	srv := h200(t)
	var registered atomic.Int32
	var waits atomic.Int32
	set := &mock.EventSet{
		WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
			if waits.Add(1) == 1 {
				return nvml.EventData{Device: srv.Devices[5], EventType: nvml.EventTypeXidCriticalError, EventData: 79}, nvml.SUCCESS
			}
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		},
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	for i, dev := range srv.Devices {
		d := dev.(*server.Device)
		unsupported := i == 0
		d.RegisterEventsFunc = func(types uint64, es nvml.EventSet) nvml.Return {
			if types != nvml.EventTypeXidCriticalError || es != set {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			if unsupported {
				return nvml.ERROR_NOT_SUPPORTED
			}
			registered.Add(1)
			return nvml.SUCCESS
		}
	}
	lib, err := open(srv)
	if err != nil {
		t.Fatal(err)
	}
	st, err := lib.WatchXid()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if registered.Load() != 7 {
		t.Fatalf("%d devices registered, want 7 (device 0 unsupported)", registered.Load())
	}
	x, err := st.Next(10 * time.Millisecond)
	if err != nil || x.Device != 5 || x.Code != 79 || !strings.HasPrefix(x.UUID, "GPU-") {
		t.Fatalf("Next = %+v, %v", x, err)
	}
	if _, err := st.Next(time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("second Next = %v, want ErrTimeout", err)
	}
}
