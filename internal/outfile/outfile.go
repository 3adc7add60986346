package outfile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Options tune Create.
type Options struct {
	// Perm is the new file's mode (0644 when zero). A regular file that
	// already exists keeps no wider a mode than Perm.
	Perm fs.FileMode
}

// File is an output being written. Write through File (an *os.File); then
// Commit to put it in place, or Abort to leave the name as it was.
type File struct {
	*os.File
	// Path is the name the caller gave; Target is the file written (Path
	// with its symbolic links followed).
	Path, Target string
	// InPlace is true when the target is a device, FIFO or socket written
	// directly: there is no temporary file and Abort cannot undo a write.
	InPlace bool
	tmp     string
	done    bool
}

// maxLinks bounds the symbolic links followed (as the kernel's ELOOP does).
const maxLinks = 40

// Resolve follows the symbolic links at path (the last component, link
// after link) and returns the name they lead to, which may not exist yet.
func Resolve(path string) (string, error) {
	cur := path
	for i := 0; i < maxLinks; i++ {
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return cur, nil
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return cur, nil
		}
		to, err := os.Readlink(cur)
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if !filepath.IsAbs(to) {
			to = filepath.Join(filepath.Dir(cur), to)
		}
		cur = to
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", path)
}

// Create opens the output at path. Opening a FIFO waits for its reader
// until ctx is done.
func Create(ctx context.Context, path string, o Options) (*File, error) {
	if o.Perm == 0 {
		o.Perm = 0o644
	}
	// Stat follows every link, the kernel's /proc/self/fd ones included
	// (/dev/stdout on a pipe names "pipe:[N]", which no path reaches): a
	// device, FIFO or socket is opened by the name given.
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		if fi.IsDir() {
			return nil, fmt.Errorf("create %s: is a directory", path)
		}
		f, err := openInPlace(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", path, err)
		}
		return &File{File: f, Path: path, Target: path, InPlace: true}, nil
	}
	target, err := Resolve(path)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	out := &File{Path: path, Target: target}
	fi, err := os.Stat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("create %s: %w", path, err)
	case !fi.Mode().IsRegular():
		// Became something else since the Stat above: never renamed over.
		return nil, fmt.Errorf("create %s: %s is a %s, not a regular file", path, target, kind(fi.Mode()))
	default:
		if p := fi.Mode().Perm(); p&^o.Perm == 0 {
			o.Perm = p // keep a narrower existing mode
		}
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	out.tmp = filepath.Join(filepath.Dir(target), "."+filepath.Base(target)+".tmp-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(out.tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, o.Perm)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	if err := f.Chmod(o.Perm); err != nil { // the umask narrowed it
		f.Close()
		os.Remove(out.tmp)
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	out.File = f
	return out, nil
}

// openInPlace opens a device, FIFO or socket for writing without creating or
// truncating anything; a FIFO's open returns when ctx is done.
func openInPlace(ctx context.Context, target string) (*os.File, error) {
	type opened struct {
		f   *os.File
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		f, err := os.OpenFile(target, os.O_WRONLY, 0)
		ch <- opened{f, err}
	}()
	select {
	case r := <-ch:
		return r.f, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.f != nil {
				r.f.Close()
			}
		}()
		return nil, context.Cause(ctx)
	}
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "special file"
}

// Commit syncs and closes a regular output and renames it into place. Only
// a regular file is ever renamed over: if something else appeared at the
// target meanwhile, Commit removes its temporary file and fails.
func (f *File) Commit() error {
	if f.done {
		return nil
	}
	f.done = true
	if f.InPlace {
		if err := f.File.Close(); err != nil {
			return fmt.Errorf("write %s: %w", f.Path, err)
		}
		return nil
	}
	err := f.File.Sync()
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if fi, lerr := os.Lstat(f.Target); lerr == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("%s became a %s while being written: not replaced", f.Target, kind(fi.Mode()))
		}
	}
	if err == nil {
		err = os.Rename(f.tmp, f.Target)
	}
	if err != nil {
		os.Remove(f.tmp)
		return fmt.Errorf("write %s: %w", f.Path, err)
	}
	return nil
}

// Abort closes the output and removes its temporary file, leaving the name
// as it was. After Commit it does nothing.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.File.Close()
	if !f.InPlace {
		os.Remove(f.tmp)
	}
}

// WriteFile writes path through write and commits it only when write
// succeeded.
func WriteFile(ctx context.Context, path string, o Options, write func(*os.File) error) error {
	f, err := Create(ctx, path, o)
	if err != nil {
		return err
	}
	if err := write(f.File); err != nil {
		f.Abort()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Commit()
}
