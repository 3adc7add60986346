// Package input opens the files kvcanary's offline commands read (bundles,
// server logs) and tells what each one is before any command judges it.
//
// Open is cancellable: opening a FIFO that has no writer yet and every Read
// return once the context is done, with an error wrapping context.Canceled
// (commands exit 130 for it). Sniff classifies the first bytes: a zstd
// stream (a bundle candidate), gzip, bzip2, xz, lz4 or zip archives, binary
// data, text, or nothing at all; a command that cannot read what it was given
// returns a *FormatError naming the file, what it is and what to do, rather
// than a verdict over bytes it did not understand.
//
// CheckDistinct rejects a file passed twice among a command's inputs (same
// path, same inode or same bytes).
//
// This is a leaf package: it imports only the standard library and
// internal/safetext.
package input
