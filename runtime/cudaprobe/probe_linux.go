//go:build linux && amd64

package cudaprobe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Drop counter slots, mirrored in bpf/cudaprobe.c.
const (
	dropRingbuf  = 0
	dropInflight = 1
	dropNoEntry  = 2
	dropSlots    = 3
)

const privilegeHint = "run as root or grant CAP_BPF and CAP_PERFMON"

// Probe is a set of attached uprobes and the ring buffer they fill.
type Probe struct {
	lib        string
	targets    []Target
	objs       cudaprobeObjects
	links      []link.Link
	rd         *ringbuf.Reader
	monoToUnix int64
	malformed  uint64
	lastBad    error
	detachErr  error // from detaching when Run ended; reported by Close
}

// privErr marks err as a privilege failure that says what to do.
func privErr(what string, err error) error {
	if errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%s: %w (%s): %w", what, ErrPermission, privilegeHint, err)
	}
	if errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("%s: %w: %w", what, ErrNotSupported, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Supported reports whether this kernel can run the probe: uprobe programs
// with bpf_get_attach_cookie (Linux 5.15+) and ring buffers (5.8+).
func Supported() error {
	if err := features.HaveProgramType(ebpf.Kprobe); err != nil {
		return privErr("check kprobe/uprobe program support", err)
	}
	if err := features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie); err != nil {
		return privErr("check bpf_get_attach_cookie (needs Linux 5.15+)", err)
	}
	if err := features.HaveMapType(ebpf.RingBuf); err != nil {
		return privErr("check ring buffer maps (needs Linux 5.8+)", err)
	}
	return nil
}

// Open resolves the traced entry points of the library, loads the BPF
// programs and attaches a uprobe and a uretprobe to each. Close releases all.
func Open(cfg Config) (*Probe, error) {
	lib := cfg.Lib
	if lib == "" {
		if len(cfg.PIDs) == 0 {
			return nil, fmt.Errorf("open CUDA probe: give a library path or a process id")
		}
		var err error
		if lib, err = FindLibcuda(cfg.procRoot(), cfg.PIDs[0]); err != nil {
			return nil, err
		}
	}
	targets, err := Resolve(lib)
	if err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, privErr("raise the locked-memory limit", err)
	}
	spec, err := loadCudaprobe()
	if err != nil {
		return nil, fmt.Errorf("load embedded BPF object: %w", err)
	}
	ring := cfg.RingBytes
	if ring == 0 {
		ring = 4 << 20
	}
	if ring < os.Getpagesize() || ring&(ring-1) != 0 {
		return nil, fmt.Errorf("open CUDA probe: ring buffer size %d: want a power of two of at least %d", ring, os.Getpagesize())
	}
	spec.Maps["events"].MaxEntries = uint32(ring)
	if len(cfg.PIDs) > 0 {
		if err := spec.Variables["filter_pids"].Set(uint8(1)); err != nil {
			return nil, fmt.Errorf("set pid filter: %w", err)
		}
	}
	p := &Probe{lib: lib, targets: targets}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		if sErr := Supported(); sErr != nil {
			return nil, sErr
		}
		return nil, privErr("load BPF programs", err)
	}
	for _, pid := range cfg.PIDs {
		if err := p.objs.Pids.Put(uint32(pid), uint8(1)); err != nil {
			p.Close()
			return nil, fmt.Errorf("add process %d to the filter: %w", pid, err)
		}
	}
	trapPID := 0
	if cfg.TrapOnlyPIDs {
		if len(cfg.PIDs) != 1 {
			p.Close()
			return nil, fmt.Errorf("open CUDA probe: trapping only in given processes needs exactly one pid, have %d", len(cfg.PIDs))
		}
		trapPID = cfg.PIDs[0]
	}
	ex, err := link.OpenExecutable(lib)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("open %s: %w", lib, err)
	}
	for _, t := range targets {
		opts := &link.UprobeOptions{Address: t.Offset, Cookie: t.Cookie(), PID: trapPID}
		up, err := ex.Uprobe(t.Name, p.objs.CudaEnter, opts)
		if err != nil {
			p.Close()
			return nil, privErr("attach uprobe to "+t.Symbol+" in "+lib, err)
		}
		p.links = append(p.links, up)
		ret, err := ex.Uretprobe(t.Name, p.objs.CudaExit, opts)
		if err != nil {
			p.Close()
			return nil, privErr("attach uretprobe to "+t.Symbol+" in "+lib, err)
		}
		p.links = append(p.links, ret)
	}
	if p.rd, err = ringbuf.NewReader(p.objs.Events); err != nil {
		p.Close()
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	var mono unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		p.Close()
		return nil, fmt.Errorf("read monotonic clock: %w", err)
	}
	p.monoToUnix = time.Now().UnixNano() - mono.Nano()
	return p, nil
}

// Lib is the library the probes are attached to.
func (p *Probe) Lib() string { return p.lib }

// Targets are the attached entry points.
func (p *Probe) Targets() []Target { return p.targets }

// AddPID adds a process to the kernel-side filter (effective when the probe
// was opened with PIDs and without TrapOnlyPIDs).
func (p *Probe) AddPID(pid int) error {
	if err := p.objs.Pids.Put(uint32(pid), uint8(1)); err != nil {
		return fmt.Errorf("add process %d to the filter: %w", pid, err)
	}
	return nil
}

// Run delivers every call to fn until ctx is done, then detaches the probes
// and drains what the ring buffer still holds and returns nil. Detaching
// first bounds the drain: a busy process calling faster than fn consumes
// would otherwise keep it going, and Ctrl-C would never end `probe cuda`.
// Calls in flight at that moment are not reported. Malformed records are
// counted in Lost. Run a Probe once.
func (p *Probe) Run(ctx context.Context, fn func(hook.CUDA)) error {
	var raw ringbuf.Record
	var r Record
	draining := false
	for {
		if !draining && ctx.Err() != nil {
			draining = true
			p.detach()
			p.rd.SetDeadline(time.Now())
		} else if !draining {
			p.rd.SetDeadline(time.Now().Add(50 * time.Millisecond))
		}
		err := p.rd.ReadInto(&raw)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			if draining {
				return nil
			}
			continue
		case errors.Is(err, ringbuf.ErrClosed):
			return nil
		case err != nil:
			return fmt.Errorf("read ring buffer: %w", err)
		}
		if err := Decode(raw.RawSample, &r); err != nil {
			p.malformed++
			p.lastBad = err
			continue
		}
		fn(r.CUDA(p.monoToUnix))
	}
}

// Lost reads the kernel's drop counters.
func (p *Probe) Lost() (Lost, error) {
	l := Lost{Malformed: p.malformed}
	for slot, dst := range map[uint32]*uint64{dropRingbuf: &l.RingFull, dropInflight: &l.InflightFull, dropNoEntry: &l.NoEntry} {
		var perCPU []uint64
		if err := p.objs.Drops.Lookup(slot, &perCPU); err != nil {
			return l, fmt.Errorf("read drop counter %d: %w", slot, err)
		}
		for _, n := range perCPU {
			*dst += n
		}
	}
	return l, nil
}

// LastMalformed is the last Decode error, nil when every record decoded.
func (p *Probe) LastMalformed() error { return p.lastBad }

// detach removes every uprobe; no new call enters the ring buffer.
func (p *Probe) detach() {
	var errs []error
	for _, l := range p.links {
		errs = append(errs, l.Close())
	}
	p.links = nil
	p.detachErr = errors.Join(p.detachErr, errors.Join(errs...))
}

// Close detaches every probe and frees the kernel objects.
func (p *Probe) Close() error {
	var errs []error
	if p.rd != nil {
		errs = append(errs, p.rd.Close())
	}
	p.detach()
	errs = append(errs, p.detachErr, p.objs.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close CUDA probe: %w", err)
	}
	return nil
}
