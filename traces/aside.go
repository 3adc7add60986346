package traces

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// SetAside keeps what a long-running recorder would otherwise truncate: when
// path names a regular file that is not empty, it is renamed, in the same
// directory, to path's name with its modification time before the
// extension ("collect.kvtrace" → "collect-20261201T161400Z.kvtrace", a
// counter after it when that name is taken), and the new name is returned.
// Nothing at path, or an empty file, returns "" and no error: there is
// nothing to lose. A service restarted with the same --record path (a
// DaemonSet pod, a systemd unit) keeps every run's bundle this way.
func SetAside(path string) (string, error) {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("set aside bundle: %w", err)
	case !st.Mode().IsRegular() || st.Size() == 0:
		return "", nil
	}
	stem, ext := path, ""
	if i := strings.LastIndexByte(path, '.'); i > strings.LastIndexByte(path, '/') && i > 0 {
		stem, ext = path[:i], path[i:]
	}
	stem += "-" + st.ModTime().UTC().Format("20060102T150405Z")
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
			return "", fmt.Errorf("set aside bundle %s: %w", path, err)
		}
		return to, nil
	}
}
