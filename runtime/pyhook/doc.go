// Package pyhook carries kvcanary's in-engine Python package (import name
// kvcanary, the files beside this one) inside the Go binary and extracts it
// for Python to import.
//
// The package's files are embedded with go:embed. Extract writes them once
// per content version — the SHA-256 of the files as extracted — into
// <cache>/pyhook-<version> (cache: os.UserCacheDir()/kvcanary unless the
// caller names one) and returns that directory: the one to put first on
// PYTHONPATH. Its top holds the kvcanary package, sitecustomize.py (the
// route into every interpreter an engine spawns) and pyproject.toml.
// Caches (__pycache__, *.pyc), dot files and tests are never extracted.
//
// Extraction is atomic: files go to a temporary directory beside the final
// one, which is renamed into place only when complete, so a crash leaves no
// half-written package under the final name. A directory whose files differ
// from the embedded ones (edited, truncated, partly deleted) is replaced.
// Concurrent extractors, in one process or several, serialise on a lock file
// in the cache directory where the platform has flock; a directory in use by
// a running engine is never touched while it is intact.
//
// Error contract: errors name the path that failed and wrap the os error; a
// missing cache directory says which environment variable to set. Nothing
// here runs Python.
package pyhook
