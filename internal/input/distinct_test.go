package input

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckDistinct(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	big := []byte(strings.Repeat("room=1 bsum=0x1\n", 10000)) // several read chunks
	a := write("a.log", big)
	copyA := write("copy.log", big)
	last := append([]byte(nil), big...)
	last[len(last)-2] = '2' // differs only in the last chunk
	b := write("b.log", last)
	short := write("short.log", big[:len(big)-1])
	empty1, empty2 := write("e1.log", nil), write("e2.log", nil)
	link := filepath.Join(dir, "link.log")
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		paths []string
		want  string // "" for no error
	}{
		{[]string{a, b, short}, ""},
		{[]string{empty1, empty2}, ""}, // empty files are not compared: nothing would count twice
		{[]string{a, b, a}, "is given twice (the same file)"},
		{[]string{a, link}, "are the same file"},
		{[]string{b, a, copyA}, "have identical content"},
		{[]string{a, filepath.Join(dir, "missing.log")}, "open input"},
	} {
		err := CheckDistinct(tc.paths)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%v: %v", tc.paths, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.paths, err, tc.want)
		}
	}
}
