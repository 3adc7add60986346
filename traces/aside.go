package traces

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SetAside keeps what a long-running recorder would otherwise truncate: when
// path names a regular file that is not empty, it is renamed, in the same
// directory, to path's name with its modification time before the
// extension ("collect.kvtrace" → "collect-20261201T161400Z.kvtrace", a
// counter after it when that name is taken), and the new name is returned.
// Nothing at path, an empty file, or anything but a regular file (a
// symlink, a device such as /dev/stdout, a FIFO) returns "" and no error:
// nothing of ours to lose, and a link or a device is not ours to move. When
// the file cannot be moved (a read-only or bind-mounted directory) the
// error says so: the caller stops rather than truncate the evidence.
func SetAside(path string) (string, error) {
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("set aside bundle: %w", err)
	case !st.Mode().IsRegular() || st.Size() == 0:
		return "", nil
	}
	dir, base := filepath.Split(path)
	ext := filepath.Ext(base)
	if ext == base {
		ext = "" // a dotfile (".kvtrace") is all name
	}
	stem := dir + strings.TrimSuffix(base, ext) + "-" + st.ModTime().UTC().Format("20060102T150405Z")
	for n := 0; ; n++ {
		to := stem + ext
		if n > 0 {
			to = stem + "-" + strconv.Itoa(n) + ext
		}
		// Link then remove: unlike rename, link never replaces a file that
		// appeared at the new name in between. A file system without hard
		// links gets a rename to a name that was free a moment before.
		err := os.Link(path, to)
		switch {
		case errors.Is(err, fs.ErrExist):
			continue
		case err == nil:
			err = os.Remove(path)
		default:
			if _, serr := os.Lstat(to); serr == nil {
				continue
			}
			err = os.Rename(path, to)
		}
		if err != nil {
			return "", fmt.Errorf("%s holds an earlier run's bundle, and it cannot be kept (%w): move it away or record elsewhere", path, err)
		}
		return to, nil
	}
}
