package input

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// Kind is what the first bytes of an input say it is.
type Kind uint8

// Kinds Sniff tells apart.
const (
	Empty  Kind = iota // no bytes at all
	Zstd               // a zstd frame (or skippable frame) magic: a bundle candidate
	Gzip               // 1f 8b
	Bzip2              // "BZh"
	XZ                 // fd 37 7a 58 5a 00
	LZ4                // 04 22 4d 18
	Zip                // "PK\x03\x04"
	Binary             // NUL bytes or mostly non-text bytes
	Text               // UTF-8 (or near enough) text: a log candidate
)

// SniffBytes is how many leading bytes Sniff looks at.
const SniffBytes = 8 << 10

func (k Kind) String() string {
	switch k {
	case Empty:
		return "empty"
	case Zstd:
		return "zstd-compressed"
	case Gzip:
		return "gzip-compressed"
	case Bzip2:
		return "bzip2-compressed"
	case XZ:
		return "xz-compressed"
	case LZ4:
		return "lz4-compressed"
	case Zip:
		return "a zip archive"
	case Binary:
		return "binary data"
	case Text:
		return "text"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// decompressHint says how to get at the content of an archive kind.
func (k Kind) decompressHint() string {
	switch k {
	case Gzip:
		return "run zcat first or pass the decompressed log"
	case Bzip2:
		return "run bzcat first or pass the decompressed log"
	case XZ:
		return "run xzcat first or pass the decompressed log"
	case LZ4:
		return "run lz4cat first or pass the decompressed log"
	case Zip:
		return "unzip it first and pass the file inside"
	}
	return ""
}

var (
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
	magics    = []struct {
		kind  Kind
		magic []byte
	}{
		{Zstd, zstdMagic},
		{Gzip, []byte{0x1f, 0x8b}},
		{Bzip2, []byte("BZh")},
		{XZ, []byte{0xfd, '7', 'z', 'X', 'Z', 0}},
		{LZ4, []byte{0x04, 0x22, 0x4d, 0x18}},
		{Zip, []byte("PK\x03\x04")},
	}
)

// Sniff says what head, the first bytes of an input (up to SniffBytes; all of
// it when shorter), is. It never fails: anything that is not empty, a known
// magic or text is Binary.
func Sniff(head []byte) Kind {
	if len(head) == 0 {
		return Empty
	}
	if len(head) >= 4 && head[0]&0xf0 == 0x50 && bytes.Equal(head[1:4], []byte{0x2a, 0x4d, 0x18}) {
		return Zstd // skippable frame 0x184D2A5?: bundle readers skip it
	}
	for _, m := range magics {
		if bytes.HasPrefix(head, m.magic) {
			return m.kind
		}
	}
	if len(head) > SniffBytes {
		head = head[:SniffBytes]
	}
	// Text: valid UTF-8 apart from a rune cut at the end of head, and few
	// NUL or control bytes other than whitespace and ESC (colourised logs).
	// A log with a stray line of garbage, or in a legacy 8-bit encoding,
	// still passes when its odd bytes are rare (under 1 in 32).
	bad := 0
	for i := 0; i < len(head); {
		c := head[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v' && c != 0x1b || c == 0x7f {
				bad++
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(head[i:])
		if r == utf8.RuneError && n == 1 {
			if !utf8.FullRune(head[i:]) && len(head)-i < utf8.UTFMax {
				break // a rune cut by the end of head
			}
			bad++
		}
		i += n
	}
	if bad*32 > len(head) {
		return Binary
	}
	return Text
}

// zstdAt is the offset of the first zstd frame magic in head, or -1: a file
// that starts with garbage but holds a zstd frame is probably a bundle whose
// first bytes were damaged.
func zstdAt(head []byte) int { return bytes.Index(head, zstdMagic) }
