package kvlayout

// DeepSeek-V4 C4 indexer geometry (SPEC.md §10). The V4 pool keeps index-K
// for ratio-4 ("C4") layers only: one entry per 4 tokens, written when the
// group's last token (position 4g+3) is processed, at C4 slot
// req_to_token[r, 4g+3] / 4. A KV page of 256 tokens holds 64 C4 slots, so
// the index-K page row has this package's 64-slot geometry with a C4 entry in
// place of a token, and the page row id is the full KV page id.
const (
	C4Ratio      = 4                    // tokens per C4 entry
	V4PageTokens = C4Ratio * PageTokens // tokens per V4 KV page (256)
)

// C4Entries is the number of C4 entries a request of tokens tokens holds in
// index-K: tokens / 4 (the partial last group lives in the compress-state ring,
// not in index-K). A V4 room digest has seq_len C4Entries(tokens).
func C4Entries(tokens int) int {
	if tokens < 0 {
		return 0
	}
	return tokens / C4Ratio
}

// C4Slot is the C4 slot of the entry whose last token sits in full-KV slot
// fullSlot (req_to_token[r, 4g+3]): fullSlot / 4. Its page row is
// C4Slot / 64 = fullSlot / 256, the full KV page id.
func C4Slot(fullSlot uint64) uint64 { return fullSlot / C4Ratio }
