package cudaprobe

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
)

// Sentinels matched with errors.Is.
var (
	// ErrNotSupported means this build, kernel or host cannot attach probes.
	ErrNotSupported = errors.New("not supported")
	// ErrPermission means the kernel refused for lack of privilege.
	ErrPermission = errors.New("permission denied")
	// ErrNoLibcuda means no libcuda.so was found where one was expected.
	ErrNoLibcuda = errors.New("libcuda.so not found")
)

// Kind groups driver entry points by what they mean for graph analysis.
type Kind uint8

// Call kinds.
const (
	KindOther Kind = iota
	KindGraphLaunch
	KindBeginCapture
	KindEndCapture
	KindInstantiate
	KindLaunch // kernel launch: stream-ordered work
	KindWaitEvent
	KindEventRecord
	KindAlloc
	KindFree
	KindMemcpyAsync // stream-ordered copy
)

var kindNames = [...]string{"other", "graph_launch", "begin_capture", "end_capture", "instantiate",
	"launch", "wait_event", "event_record", "alloc", "free", "memcpy_async"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Where a value comes from in a record.
type src int8

const (
	none src = -1
	a0   src = 0 // a0..a5: argument registers
	a1   src = 1
	a2   src = 2
	a3   src = 3
	a4   src = 4
	a5   src = 5
	rd   src = 6 // the word read at entry (Spec.ReadBase + ReadOff)
	out  src = 7 // the word behind argument Spec.Out, read at return
)

// Spec says, for one driver entry point (without variant suffix), where its
// stream, graph-exec, call-specific handle and byte count live.
type Spec struct {
	Base   string
	Kind   Kind
	Stream src
	Exec   src
	Arg    src
	Bytes  src
	// Out is the argument index whose pointee is read at return, -1 for none.
	Out int8
	// ReadBase selects the entry-time memory read: -1 none, 6 the stack
	// pointer, 0..5 an argument register; ReadOff is added to it.
	ReadBase int8
	ReadOff  uint16
}

const readSP = 6

// specs lists entry points that share one layout: the same kind and the same
// places for stream, exec, arg, bytes and the reads, under each name.
func specs(k Kind, stream, exec, arg, bytes src, outArg, readBase int8, readOff uint16, bases ...string) []Spec {
	out := make([]Spec, len(bases))
	for i, b := range bases {
		out[i] = Spec{Base: b, Kind: k, Stream: stream, Exec: exec, Arg: arg, Bytes: bytes, Out: outArg, ReadBase: readBase, ReadOff: readOff}
	}
	return out
}

// Specs is the table of traced entry points. Its order is part of the record
// format (a record names its spec by index): append only.
var Specs = slices.Concat(
	// cuGraphLaunch(CUgraphExec, CUstream)
	specs(KindGraphLaunch, a1, a0, none, none, -1, -1, 0, "cuGraphLaunch"),
	// cuStreamBeginCapture(CUstream[, CUstreamCaptureMode])
	specs(KindBeginCapture, a0, none, none, none, -1, -1, 0, "cuStreamBeginCapture"),
	// cuStreamEndCapture(CUstream, CUgraph *out)
	specs(KindEndCapture, a0, none, out, none, 1, -1, 0, "cuStreamEndCapture"),
	// cuGraphInstantiate*(CUgraphExec *out, CUgraph, ...)
	specs(KindInstantiate, none, out, a1, none, 0, -1, 0,
		"cuGraphInstantiate", "cuGraphInstantiateWithFlags", "cuGraphInstantiateWithParams"),
	// cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, CUstream, params, extra):
	// the stream is the 9th argument, third stack word above the return address.
	specs(KindLaunch, rd, none, a0, none, -1, readSP, 24, "cuLaunchKernel"),
	// cuLaunchKernelEx(const CUlaunchConfig *cfg, f, params, extra): cfg->hStream at offset 32.
	specs(KindLaunch, rd, none, a1, none, -1, 0, 32, "cuLaunchKernelEx"),
	// cuStreamWaitEvent(CUstream, CUevent, flags)
	specs(KindWaitEvent, a0, none, a1, none, -1, -1, 0, "cuStreamWaitEvent"),
	// cuEventRecord[WithFlags](CUevent, CUstream[, flags])
	specs(KindEventRecord, a1, none, a0, none, -1, -1, 0, "cuEventRecord", "cuEventRecordWithFlags"),
	// cuMemAlloc*(CUdeviceptr *out, size, ...)
	specs(KindAlloc, none, none, out, a1, 0, -1, 0, "cuMemAlloc", "cuMemAllocManaged", "cuMemAllocHost"),
	specs(KindAlloc, none, none, out, none, 0, -1, 0, "cuMemAllocPitch"),
	specs(KindAlloc, a2, none, out, a1, 0, -1, 0, "cuMemAllocAsync"),
	specs(KindAlloc, a3, none, out, a1, 0, -1, 0, "cuMemAllocFromPoolAsync"),
	// cuMemFree*(ptr[, CUstream])
	specs(KindFree, none, none, a0, none, -1, -1, 0, "cuMemFree", "cuMemFreeHost"),
	specs(KindFree, a1, none, a0, none, -1, -1, 0, "cuMemFreeAsync"),
	// cuMemcpy*Async: (dst, src, bytes, CUstream) and relatives
	specs(KindMemcpyAsync, a3, none, a0, a2, -1, -1, 0,
		"cuMemcpyAsync", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync"),
	specs(KindMemcpyAsync, a5, none, a0, a4, -1, -1, 0, "cuMemcpyPeerAsync"),
	specs(KindMemcpyAsync, a4, none, a0, a3, -1, -1, 0, "cuMemcpyHtoAAsync", "cuMemcpyAtoHAsync"),
	specs(KindMemcpyAsync, a1, none, a0, none, -1, -1, 0, "cuMemcpy2DAsync", "cuMemcpy3DAsync", "cuMemcpy3DPeerAsync"),
)

// Variants are the symbol suffixes libcuda uses for ABI revisions (_v2, _v3)
// and per-thread default-stream entry points (_ptsz, _ptds). Their order is
// part of the record format: append only.
var Variants = []string{"", "_v2", "_v3", "_ptsz", "_ptds", "_v2_ptsz", "_v2_ptds", "_v3_ptsz", "_v3_ptds"}

// names[spec][variant] is the symbol name, precomputed so decoding allocates nothing.
var names = func() [][]string {
	n := make([][]string, len(Specs))
	for i, s := range Specs {
		n[i] = make([]string, len(Variants))
		for j, v := range Variants {
			n[i][j] = s.Base + v
		}
	}
	return n
}()

// Cookie layout (mirrored in bpf/cudaprobe.c):
//
//	bits  0-15 spec index
//	bits 16-23 variant index
//	bits 24-27 out argument + 1 (0: none)
//	bits 28-31 entry read base: 0 none, 1 stack pointer, k+2 argument k
//	bits 32-47 entry read offset
func cookie(specIdx, variant int) uint64 {
	s := Specs[specIdx]
	c := uint64(specIdx) | uint64(variant)<<16
	if s.Out >= 0 {
		c |= uint64(s.Out+1) << 24
	}
	switch {
	case s.ReadBase == readSP:
		c |= 1 << 28
	case s.ReadBase >= 0:
		c |= uint64(s.ReadBase+2) << 28
	}
	if s.ReadBase >= 0 {
		c |= uint64(s.ReadOff) << 32
	}
	return c
}

// Target is one function to probe in a library.
type Target struct {
	Symbol  string // as shown: name, or name@VERSION / name@@VERSION when versioned
	Name    string // symbol name without version, e.g. "cuMemAlloc_v2"
	Spec    int    // index into Specs
	Variant int    // index into Variants
	Offset  uint64 // file offset of the function entry
	Aliases []string
}

// Cookie is the attach cookie the BPF programs decode.
func (t Target) Cookie() uint64 { return cookie(t.Spec, t.Variant) }

// fullIndex maps every symbol name (base + variant) to its spec and variant.
var fullIndex = func() map[string][2]int {
	m := make(map[string][2]int, len(Specs)*len(Variants))
	for i := range Specs {
		for v := range Variants {
			m[names[i][v]] = [2]int{i, v}
		}
	}
	return m
}()

// splitName maps a symbol name to its spec and variant.
func splitName(name string) (specIdx, variant int, ok bool) {
	sv, ok := fullIndex[name]
	return sv[0], sv[1], ok
}

// Resolve lists the traced entry points a library exports, one Target per
// distinct function address (aliases, e.g. two versions of one function at
// the same address, are folded). Versioned symbols resolve by their plain
// name. It reads only the ELF file; nothing is attached.
func Resolve(path string) ([]Target, error) {
	f, err := elf.Open(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			// already "open PATH: reason"; wrapping again repeated the path
			return nil, fmt.Errorf("resolve CUDA entry points: %w", err)
		}
		return nil, fmt.Errorf("resolve CUDA entry points in %s: %w", path, err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("read dynamic symbols of %s: %w", path, err)
	}
	if static, err := f.Symbols(); err == nil {
		syms = append(syms, static...)
	}
	byOff := map[uint64]int{}
	var out []Target
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Value == 0 {
			continue
		}
		si, v, ok := splitName(s.Name)
		if !ok {
			continue
		}
		off, ok := fileOffset(f, s.Value)
		if !ok {
			continue
		}
		display := s.Name
		if s.HasVersion && s.Version != "" {
			sep := "@@"
			if s.VersionIndex.IsHidden() {
				sep = "@"
			}
			display = s.Name + sep + s.Version
		}
		if i, seen := byOff[off]; seen {
			if out[i].Symbol != display && !contains(out[i].Aliases, display) {
				out[i].Aliases = append(out[i].Aliases, display)
			}
			continue
		}
		byOff[off] = len(out)
		out = append(out, Target{Symbol: display, Name: s.Name, Spec: si, Variant: v, Offset: off})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("resolve CUDA driver entry points in %s: none exported (is it libcuda.so?): %w", path, ErrNoLibcuda)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Offset < out[j].Offset
	})
	return out, nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// fileOffset converts a virtual address to a file offset through the
// executable PT_LOAD segment that holds it.
func fileOffset(f *elf.File, vaddr uint64) (uint64, bool) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 {
			continue
		}
		if p.Vaddr <= vaddr && vaddr < p.Vaddr+p.Memsz {
			return vaddr - p.Vaddr + p.Off, true
		}
	}
	return 0, false
}
