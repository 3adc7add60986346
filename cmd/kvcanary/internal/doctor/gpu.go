package doctor

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kvcanary/kvcanary/internal/safetext"
	"github.com/kvcanary/kvcanary/runtime/gpu"
)

func gpuChecks(env Env) []Check {
	nvmlC := Check{Name: "NVML", Group: "gpu"}
	drv := Check{Name: "driver", Group: "gpu"}
	lib, err := env.OpenGPU()
	if err != nil {
		nvmlC.Status, nvmlC.Detail = StatusFail, err.Error()
		nvmlC.Fix = "install the NVIDIA driver (it ships libnvidia-ml.so.1) or run on a GPU host; every command also runs on the twin (kvcanary sim)"
		if errors.Is(err, gpu.ErrNotSupported) {
			nvmlC.Fix = "build kvcanary on linux with cgo (CGO_ENABLED=1 and a C compiler such as gcc): make install in a clone; no prebuilt binaries are published yet"
		}
		drv.Status, drv.Detail = StatusSkip, "needs NVML"
		return []Check{nvmlC, drv}
	}
	defer lib.Close()
	devs, err := lib.Devices()
	if err != nil {
		nvmlC.Status, nvmlC.Detail = StatusFail, err.Error()
		nvmlC.Fix = "check `nvidia-smi`; a GPU that fell off the bus needs a reset"
	} else {
		nvmlC.Status = StatusOK
		nvmlC.Detail = fmt.Sprintf("libnvidia-ml.so.1 loaded, %d GPU(s)%s", len(devs), deviceNames(devs))
		if len(devs) == 0 {
			nvmlC.Status, nvmlC.Fix = StatusWarn, "no GPU visible: check CUDA_VISIBLE_DEVICES / container device mounts"
		}
	}
	v, verr := lib.DriverVersion()
	c, cerr := lib.CUDADriverVersion()
	if verr != nil || cerr != nil {
		drv.Status, drv.Detail = StatusWarn, fmt.Sprintf("cannot read versions: %v", errors.Join(verr, cerr))
	} else {
		drv.Status, drv.Detail = StatusOK, fmt.Sprintf("NVIDIA %s, CUDA %s", v, gpu.CUDAVersion(c))
	}
	return []Check{nvmlC, drv}
}

// deviceNames summarises device names: ": NVIDIA H200 141GB HBM3e ×8".
func deviceNames(devs []gpu.Device) string {
	counts := map[string]int{}
	var order []string
	for _, d := range devs {
		n, err := d.Name()
		if err != nil {
			n = "unknown"
		}
		if counts[n] == 0 {
			order = append(order, n)
		}
		counts[n]++
	}
	parts := make([]string, len(order))
	for i, n := range order {
		parts[i] = fmt.Sprintf("%s ×%d", safetext.Quote(n), counts[n])
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
}
