package pyhook

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// The Python package as shipped. "all:" keeps names starting with "_"
// (__init__.py); layout drops caches, dot files and tests.
//
//go:embed all:kvcanary all:sitecustomize pyproject.toml
var embedded embed.FS

// markerName is the file, at the top of an extracted directory, holding the
// full content version; written before the directory is renamed into place.
const markerName = ".kvcanary-pyhook"

// File is one file of the extracted package.
type File struct {
	Path string // slash-separated, relative to the extracted directory
	Data []byte
}

// tree is a package layout and its content version.
type tree struct {
	files   []File
	version string // hex SHA-256 over the files (paths, sizes, bytes)
}

var (
	embeddedOnce sync.Once
	embeddedTree *tree
	embeddedErr  error
)

func pkg() (*tree, error) {
	embeddedOnce.Do(func() { embeddedTree, embeddedErr = newTree(embedded) })
	return embeddedTree, embeddedErr
}

// newTree lays out fsys as it is extracted: sitecustomize/* moves to the
// top (Python runs sitecustomize.py only from a sys.path entry's top).
func newTree(fsys fs.FS) (*tree, error) {
	byPath := map[string]string{}
	var files []File
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if p != "." && skipName(name, d.IsDir()) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		dst := p
		if rest, ok := strings.CutPrefix(p, "sitecustomize/"); ok {
			dst = path.Base(rest)
		}
		if prev, dup := byPath[dst]; dup {
			return fmt.Errorf("embedded %s and %s both extract to %s", prev, p, dst)
		}
		byPath[dst] = p
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		files = append(files, File{Path: dst, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read embedded python package: %w", err)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		binary.LittleEndian.PutUint64(n[:], uint64(len(f.Path)))
		h.Write(n[:])
		h.Write([]byte(f.Path))
		binary.LittleEndian.PutUint64(n[:], uint64(len(f.Data)))
		h.Write(n[:])
		h.Write(f.Data)
	}
	return &tree{files: files, version: hex.EncodeToString(h.Sum(nil))}, nil
}

// skipName reports whether a file or directory stays out of the extracted
// package: byte-code caches, dot files (editor and tool state) and tests.
func skipName(name string, dir bool) bool {
	switch {
	case strings.HasPrefix(name, "."), name == "__pycache__":
		return true
	case dir:
		return name == "tests"
	default:
		return strings.HasSuffix(name, ".pyc") || strings.HasSuffix(name, ".pyo")
	}
}

// dirName is the extracted directory's name: pyhook-<first 16 hex digits>.
func (t *tree) dirName() string { return "pyhook-" + t.version[:16] }

// Version returns the content version of the embedded package: the hex
// SHA-256 of its files as extracted.
func Version() (string, error) {
	t, err := pkg()
	if err != nil {
		return "", err
	}
	return t.version, nil
}

// Files returns the embedded package's files as they are extracted.
func Files() ([]File, error) {
	t, err := pkg()
	if err != nil {
		return nil, err
	}
	return append([]File(nil), t.files...), nil
}

var versionRE = regexp.MustCompile(`(?m)^__version__\s*=\s*["']([^"'\n]+)["']`)

// PackageVersion returns the Python package's __version__ (kvcanary/__init__.py),
// or "" when the file does not state one.
func PackageVersion() (string, error) {
	t, err := pkg()
	if err != nil {
		return "", err
	}
	for _, f := range t.files {
		if f.Path == "kvcanary/__init__.py" {
			if m := versionRE.FindSubmatch(f.Data); m != nil {
				return string(m[1]), nil
			}
		}
	}
	return "", nil
}

// CacheRoot is where Extract puts the package by default:
// os.UserCacheDir()/kvcanary.
func CacheRoot() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find the user cache directory (set XDG_CACHE_HOME or HOME): %w", err)
	}
	return filepath.Join(d, "kvcanary"), nil
}

// Extract makes sure the embedded package is extracted under root (""
// means CacheRoot) and returns its directory, the entry to put first on
// PYTHONPATH. It writes nothing when an intact copy of this version is there.
func Extract(root string) (string, error) {
	t, err := pkg()
	if err != nil {
		return "", err
	}
	return t.extract(root)
}

func (t *tree) extract(root string) (string, error) {
	if root == "" {
		r, err := CacheRoot()
		if err != nil {
			return "", err
		}
		root = r
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("create cache directory: %w", err)
	}
	final := filepath.Join(root, t.dirName())
	if t.intact(final) {
		return final, nil
	}
	unlock, exclusive, err := lockFile(filepath.Join(root, "pyhook.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if t.intact(final) { // another extractor finished while we waited
		return final, nil
	}
	if exclusive {
		removeLeftovers(root, t.dirName())
	}
	tmp, err := os.MkdirTemp(root, "."+t.dirName()+".tmp-")
	if err != nil {
		return "", fmt.Errorf("extract python package: %w", err)
	}
	if err := t.write(tmp); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if _, err := os.Lstat(final); err == nil {
		// Damaged or partial: move it aside first (rename cannot replace a
		// non-empty directory), then drop it.
		trash, terr := os.MkdirTemp(root, "."+t.dirName()+".damaged-")
		if terr == nil {
			terr = os.Rename(final, filepath.Join(trash, "old"))
		}
		if terr != nil {
			os.RemoveAll(tmp)
			return "", fmt.Errorf("replace damaged %s: %w", final, terr)
		}
		defer os.RemoveAll(trash)
	}
	if err := os.Rename(tmp, final); err != nil {
		os.RemoveAll(tmp)
		if t.intact(final) { // lost a race where there is no file lock
			return final, nil
		}
		return "", fmt.Errorf("install python package at %s: %w", final, err)
	}
	return final, nil
}

// write extracts the files into dir and marks it with the version.
func (t *tree) write(dir string) error {
	for _, f := range t.files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("extract python package: %w", err)
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return fmt.Errorf("extract python package: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, markerName), []byte(t.version+"\n"), 0o644); err != nil {
		return fmt.Errorf("extract python package: %w", err)
	}
	// MkdirTemp made it 0700; Python in other processes of this user only
	// needs what the files already allow, but tools (containers that map
	// the cache under another uid) expect the usual directory mode.
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("extract python package: %w", err)
	}
	return nil
}

// intact reports whether dir holds exactly this version's files (other
// files, such as the __pycache__ Python writes, are allowed).
func (t *tree) intact(dir string) bool {
	m, err := os.ReadFile(filepath.Join(dir, markerName))
	if err != nil || strings.TrimSpace(string(m)) != t.version {
		return false
	}
	for _, f := range t.files {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil || !bytes.Equal(b, f.Data) {
			return false
		}
	}
	return true
}

// removeLeftovers deletes temporary and damaged directories that crashed
// extractors of this version left behind. Only called under the lock: no
// other extractor can be writing one.
func removeLeftovers(root, name string) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, "."+name+".tmp-") || strings.HasPrefix(n, "."+name+".damaged-") {
			os.RemoveAll(filepath.Join(root, n))
		}
	}
}
