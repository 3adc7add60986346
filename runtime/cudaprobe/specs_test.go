package cudaprobe

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

func TestSplitName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		base    string
		variant string
		ok      bool
	}{
		{"cuGraphLaunch", "cuGraphLaunch", "", true},
		{"cuGraphLaunch_ptsz", "cuGraphLaunch", "_ptsz", true},
		{"cuMemcpyHtoDAsync_v2_ptsz", "cuMemcpyHtoDAsync", "_v2_ptsz", true},
		{"cuStreamBeginCapture_v2", "cuStreamBeginCapture", "_v2", true},
		{"cuGraphInstantiateWithFlags", "cuGraphInstantiateWithFlags", "", true},
		{"cuMemcpyAsync_ptds", "cuMemcpyAsync", "_ptds", true},
		{"cuInit", "", "", false},
		{"cuGraphLaunch_v9", "", "", false},
		{"", "", "", false},
	} {
		si, v, ok := splitName(tc.name)
		if ok != tc.ok || (ok && (Specs[si].Base != tc.base || Variants[v] != tc.variant)) {
			t.Errorf("splitName(%q) = %d %d %v", tc.name, si, v, ok)
		}
		if ok && names[si][v] != tc.name {
			t.Errorf("names[%d][%d] = %q", si, v, names[si][v])
		}
	}
	if KindOf("cuLaunchKernel_ptsz") != KindLaunch || KindOf("cuFoo") != KindOther || BaseName("cuMemFree_v2") != "cuMemFree" {
		t.Fatal("KindOf/BaseName")
	}
}

func TestCookieLayout(t *testing.T) {
	// Mirrors COOKIE_* in bpf/cudaprobe.c.
	for si, s := range Specs {
		for v := range Variants {
			c := cookie(si, v)
			if int(c&0xffff) != si || int(c>>16&0xff) != v {
				t.Fatalf("%s: spec/variant bits of %#x", names[si][v], c)
			}
			outArg := int(c>>24&0xf) - 1
			if outArg != int(s.Out) {
				t.Fatalf("%s: out %d, want %d", s.Base, outArg, s.Out)
			}
			base := int(c >> 28 & 0xf)
			switch {
			case s.ReadBase < 0 && base != 0,
				s.ReadBase == readSP && base != 1,
				s.ReadBase >= 0 && s.ReadBase < readSP && base != int(s.ReadBase)+2:
				t.Fatalf("%s: read base %d for %d", s.Base, base, s.ReadBase)
			}
			if off := uint16(c >> 32); s.ReadBase >= 0 && off != s.ReadOff {
				t.Fatalf("%s: read offset %d", s.Base, off)
			}
			if c>>48 != 0 {
				t.Fatalf("%s: high bits set in %#x", s.Base, c)
			}
		}
	}
	// cuLaunchKernel's stream is the third stack word above the return address.
	if c := cookie(fullIndex["cuLaunchKernel"][0], 0); c>>28&0xf != 1 || uint16(c>>32) != 24 {
		t.Fatalf("cuLaunchKernel cookie %#x", c)
	}
}

func TestResolveStub(t *testing.T) {
	lib, _ := buildStub(t)
	targets, err := Resolve(lib)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	offs := map[uint64]bool{}
	for _, tg := range targets {
		got = append(got, tg.Symbol)
		if offs[tg.Offset] {
			t.Fatalf("offset %#x attached twice", tg.Offset)
		}
		offs[tg.Offset] = true
		if names[tg.Spec][tg.Variant] != tg.Name {
			t.Fatalf("target %+v: spec/variant name %q", tg, names[tg.Spec][tg.Variant])
		}
	}
	sort.Strings(got)
	want := []string{
		"cuEventRecord@@LIBCUDA_1.0", "cuGraphInstantiateWithFlags@@LIBCUDA_1.0", "cuGraphLaunch@@LIBCUDA_1.0",
		"cuGraphLaunch_ptsz@@LIBCUDA_1.0", "cuLaunchKernel@@LIBCUDA_1.0", "cuMemAlloc_v2@@LIBCUDA_1.0",
		"cuMemFree_v2@@LIBCUDA_1.0", "cuMemcpyAsync@@LIBCUDA_1.1", "cuMemcpyAsync@LIBCUDA_1.0",
		"cuMemcpyHtoDAsync_v2@@LIBCUDA_1.0", "cuStreamBeginCapture_v2@@LIBCUDA_1.0",
		"cuStreamEndCapture@@LIBCUDA_1.0", "cuStreamWaitEvent@@LIBCUDA_1.0",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("targets\n got %v\nwant %v", got, want)
	}
}

func TestResolveErrors(t *testing.T) {
	if _, err := Resolve(filepath.Join(t.TempDir(), "missing.so")); err == nil || strings.Count(err.Error(), "missing.so") != 1 || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v, want the path named once and os.ErrNotExist", err)
	}
	notELF := filepath.Join(t.TempDir(), "libcuda.so.1")
	if err := os.WriteFile(notELF, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(notELF); err == nil || !strings.Contains(err.Error(), notELF) {
		t.Fatalf("Resolve of a non-ELF file: %v, want an error naming %s", err, notELF)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(self); !errors.Is(err, ErrNoLibcuda) {
		t.Fatalf("Resolve(test binary) = %v, want ErrNoLibcuda", err)
	}
}
