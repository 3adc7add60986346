package traces

import (
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Limits shared by the writer and the reader (see FORMAT.md).
const (
	// frameBytes is the JSON size at which the writer ends a frame. Larger
	// frames compress slightly better; smaller ones lose less on a crash and
	// bound reader memory. A single larger line still goes into one frame.
	frameBytes = 1 << 20

	// windowBytes is the zstd window of written frames. Frames are about
	// frameBytes long, so a larger window would find almost nothing more.
	windowBytes = 1 << 20

	// maxWindowBytes is the largest frame window the reader accepts: the
	// RFC 8878 recommendation every decoder supports.
	maxWindowBytes = 8 << 20

	// maxFrameBytes caps both a frame's compressed size and what it may decode
	// to. Frames above it are skipped and counted. A reader holds at most the
	// compressed frame and aheadFrames+2 decoded ones, so a hostile file cannot
	// make it hold more than about 5 x 32 MiB.
	maxFrameBytes = 32 << 20

	// maxLineBytes is the largest event line a writer accepts, so every frame
	// it writes (at most frameBytes plus one line) stays readable.
	maxLineBytes = 16 << 20

	// maxReadLineBytes is the longest line a reader assembles (lines of
	// re-compressed bundles cross frames); longer ones are skipped and
	// counted, so a frame stream without newlines cannot grow memory.
	maxReadLineBytes = maxFrameBytes

	// The decompression budget: after reading the first c compressed bytes
	// a reader has decoded at most decodeSlack + decodeRatio*c bytes; a frame
	// (or the rest of a large one) that would pass it is skipped and counted
	// as damage. Twin bundles compress 4-6x, but repetitive events
	// re-compressed by `zstdcat | jq | zstd -19` reach 70-100:1 (and were cut
	// at the old 64:1), so the ratio is 1024: still bounded work per input
	// byte, and a decompression bomb (a 100 KB file that decodes to
	// gigabytes of junk lines) is cut after about 100 MB of work.
	decodeSlack = maxFrameBytes
	decodeRatio = 1024
)

// One encoder and one decoder for the process. EncodeAll and DecodeAll are
// safe for concurrent use and reuse their internal state between calls, so
// every writer and reader shares them (restic does the same per repository).
var (
	encoder = sync.OnceValues(func() (*zstd.Encoder, error) {
		return zstd.NewWriter(nil,
			// Speed over ratio: bundles are written while the system under test
			// runs, and SpeedFastest still shrinks event JSON about 5-10x.
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			// The XXH64 content checksum lets readers reject a damaged frame
			// before using any of its bytes.
			zstd.WithEncoderCRC(true),
			// A fixed window (not "single segment", whose window is the whole
			// content) keeps a frame holding one huge event decodable under the
			// reader's window cap.
			zstd.WithWindowSize(windowBytes),
			zstd.WithSingleSegment(false),
			// An empty frame is never asked for; if it were, write nothing.
			zstd.WithZeroFrames(false),
			// Concurrent EncodeAll calls (several writers in one process) each
			// get their own encoder state, up to one per CPU.
			zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
		)
	})
	decoder = sync.OnceValues(func() (*zstd.Decoder, error) {
		return zstd.NewReader(nil,
			// Cap what one frame may decode to (DecodeAll refuses more).
			zstd.WithDecoderMaxMemory(maxFrameBytes),
			// Refuse frames that ask for a window beyond what we write and what
			// the RFC says every decoder supports.
			zstd.WithDecoderMaxWindow(maxWindowBytes),
			// Keep decode buffers between frames: reading is the hot path.
			zstd.WithDecoderLowmem(false),
			// Concurrent DecodeAll calls (several readers) up to one per CPU.
			zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
			// Verify every frame's content checksum (the default, stated).
			zstd.IgnoreChecksum(false),
		)
	})
)
