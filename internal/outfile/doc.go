// Package outfile writes the files kvcanary's commands produce (a merged
// bundle, a report, a bisect state) without ever replacing what is not
// theirs to replace.
//
// A regular file, or a name where nothing exists yet, is written under a
// temporary name in the same directory and renamed into place only by
// Commit: an interrupted or failed write leaves the old file (or nothing) at
// the name. Anything else found at the name is never renamed over: a device
// (/dev/null, /dev/stdout), a FIFO or a socket is opened and written in
// place (no kvcanary output needs to seek, so none is refused). A symbolic link is followed: the file it names is what gets written,
// and the link itself stays.
//
// Errors name the path and wrap the os error. This is a leaf package: it
// imports only the standard library.
package outfile
