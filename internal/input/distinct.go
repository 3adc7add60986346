package input

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kvcanary/kvcanary/internal/safetext"
)

// CheckDistinct rejects a file passed twice among paths: the same path, the
// same inode (hard link, symlink) or the same content. A command that merges
// its inputs would count such a file's records twice. Regular files of equal,
// non-zero size are compared byte by byte, stopping at the first difference.
func CheckDistinct(paths []string) error {
	type seenFile struct {
		path string
		abs  string
		fi   os.FileInfo
	}
	var seen []seenFile
	for _, p := range paths {
		in := seenFile{path: p}
		in.abs, _ = filepath.Abs(p)
		for _, o := range seen {
			if o.abs == in.abs {
				return fmt.Errorf("input %s is given twice (the same file): pass each host's or side's input once", safetext.Quote(p))
			}
		}
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("open input: %w", err)
		}
		in.fi = fi
		for _, o := range seen {
			if os.SameFile(o.fi, fi) {
				return fmt.Errorf("inputs %s and %s are the same file", safetext.Quote(o.path), safetext.Quote(p))
			}
			if o.fi.Size() != fi.Size() || fi.Size() == 0 || !o.fi.Mode().IsRegular() || !fi.Mode().IsRegular() {
				continue
			}
			same, err := sameContent(o.path, p)
			if err != nil {
				return err
			}
			if same {
				return fmt.Errorf("inputs %s and %s have identical content: one file was passed twice", safetext.Quote(o.path), safetext.Quote(p))
			}
		}
		seen = append(seen, in)
	}
	return nil
}

// sameContent reports whether files a and b hold the same bytes.
func sameContent(a, b string) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, fmt.Errorf("open input: %w", err)
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false, fmt.Errorf("open input: %w", err)
	}
	defer fb.Close()
	const chunk = 64 << 10
	ba, bb := make([]byte, chunk), make([]byte, chunk)
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if ea != nil && !errors.Is(ea, io.EOF) && !errors.Is(ea, io.ErrUnexpectedEOF) {
			return false, fmt.Errorf("read %s: %w", a, ea)
		}
		if eb != nil && !errors.Is(eb, io.EOF) && !errors.Is(eb, io.ErrUnexpectedEOF) {
			return false, fmt.Errorf("read %s: %w", b, eb)
		}
		if !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if ea != nil || eb != nil { // both ended (equal lengths read so far)
			return ea != nil && eb != nil, nil
		}
	}
}
