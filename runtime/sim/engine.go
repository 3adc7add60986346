package sim

import (
	"context"
	"fmt"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/kvlayout"
	"github.com/kvcanary/kvcanary/spec/pagediff"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Request is one generation request: a prompt (history and tool result
// included), where the copy model starts reading (BuildPrompt's hint), and
// the expected output when the caller knows it (ground truth for Deviated).
type Request struct {
	ID           string
	Session      string
	Round        int
	Prompt       []Token
	Hint         int
	Expected     []Token // nil when unknown
	MaxNewTokens int     // 0: DefaultMaxNewTokens
}

// DefaultMaxNewTokens bounds a request's output when MaxNewTokens is 0.
const DefaultMaxNewTokens = 160

// Completion is a finished request.
type Completion struct {
	ID           string
	Session      string
	Round        int
	Room         uint64
	Tokens       []Token // generated tokens, EOS excluded
	Text         string
	Deviated     bool   // output differs from Request.Expected
	FinishReason string // "stop" | "length" | "abort"
	Err          string // why an aborted request failed
	Retractions  int
	Step         uint64 // engine step the request finished at
}

// Handle is a submitted request's future.
type Handle struct {
	done chan struct{}
	c    Completion
}

// Done is closed when the request finished.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Result returns the completion once Done is closed.
func (h *Handle) Result() Completion { <-h.done; return h.c }

// request states.
const (
	stQueued    = iota // waiting for prefill
	stPrefilled        // prefill done, waiting for decode bootstrap (PD)
	stTransfer         // decode pages allocated, chunks in flight
	stRunning
	stDone
)

type request struct {
	Request
	h           *Handle
	idx         int32
	room        uint64
	tokens      []Token // prompt + generated
	ptr         int     // last copied position
	nGen        int
	pages       []uint32 // decode page table
	ppages      []uint32 // prefill page table (PD)
	state       int
	retractions int
	xfer        *transfer
	outSlot     int // this step's out_loc (a draft slot when the token is moved after the step)
	finalSlot   int // the slot of this step's token at its position (outSlot unless moved)
}

type chunk struct {
	src, dst []uint32
	land     uint64 // engine step at which the chunk lands
	landed   bool
}

type transfer struct {
	r         *request
	chunks    []chunk
	nLanded   int
	completed bool
}

// Engine is the twin's serving runtime: prefill and decode workers with
// paged index-K arenas, a transfer engine, a continuous-batching scheduler
// and captured decode graphs. Submit is safe from any goroutine; Step and
// Run drive the engine from one goroutine.
type Engine struct {
	cfg   Config
	pub   hook.Publisher
	vocab *Vocab
	log   io.Writer

	dec, pre           *Arena
	decAlloc, preAlloc *Allocator

	mu     sync.Mutex
	inbox  []*request
	wake   chan struct{}
	closed bool

	reqs      []*request // by idx (1-based; 0 unused)
	queue     []*request // waiting for prefill (retracted ones first)
	bootstrap []*request // prefilled, waiting for decode pages (PD)
	xfers     []*transfer
	running   []*request
	graphs    map[int]*graphPlan
	buckets   []int
	policy    pagediff.Policy
	roomRng   *rand.Rand
	xferRng   *rand.Rand
	specRng   *rand.Rand // which accepted tokens were verified in a draft slot (tree drafting)

	step         uint64
	replays      uint64
	lastBucket   int // bucket of the last graph replay
	newTokRatio  float64
	stats        Stats
	tokensWindow int
	flagged      map[string]bool
	gdSamples    uint64 // graph-vs-eager samples published (sampleRows' count)

	testStore    func(rw *row, owner int32)  // tests observe each out_loc store and the page's owner
	testPadStore func(slot int, owner int32) // tests observe padded-row stores outside slot 0
	testComplete func(x *transfer)           // tests observe transfer completions
	testMove     func(written []uint32)      // tests observe the page rows each faulty move wrote

	spec specState // speculative moves and the between-phase canary (spec.go)

	// scratch
	units        []unit
	rowBufs      [][]float32
	keyBuf       []float32
	pgBuf        []uint32
	digA         []uint64
	digCache     []uint64 // canary: last digest of each page
	digGen       []uint32 // canary: the page's write generation at that digest
	digOK        []bool
	canaryVerify int // re-digest everything every Nth replay (canaryVerifyEvery; tests use 1)
	digB         []uint64
	changed      []uint32
	// canary slot check (canary/SPEC.md §2): the batch rows ordered by
	// out_loc, the bytes of their distinct expected pages before the replay
	// (page after page, in that order), and the bytes each row stored.
	slotRows []int32
	slotSnap []byte
	slotKeys []byte
}

// Stats are the scheduler's counters.
type Stats struct {
	Steps          uint64  `json:"steps"`
	GraphReplays   uint64  `json:"graph_replays"`
	EagerSteps     uint64  `json:"eager_steps"`
	PeakRunningReq int     `json:"peak_running_req"`
	Retractions    int     `json:"retractions"`
	PeakTokenUsage float64 `json:"peak_token_usage"`
	DecodeTokens   int64   `json:"decode_tokens"`
	PrefillTokens  int64   `json:"prefill_tokens"`
	Requests       int     `json:"requests"`
	SpecMoves      int64   `json:"spec_moves,omitempty"`       // IndexKeyCache.move calls (one per moved token)
	SpecMoveErrors int64   `json:"spec_move_errors,omitempty"` // of which failed as torch would (index out of bounds)
}

// SGLang's new_token_ratio: the fraction of a running request's remaining
// max_new_tokens admission reserves, decaying each step while nothing is
// retracted (optimistic admission), bumped on retraction.
const (
	initNewTokenRatio  = 0.7
	minNewTokenRatio   = 0.0
	newTokenRatioDecay = 0.005
)

// prefillLookahead bounds how far the decode prealloc queue looks past a
// request that does not fit.
const prefillLookahead = 8

// retractDecodeSteps is how many more tokens per running request the
// decode memory check wants room for.
const retractDecodeSteps = 20

// StepTime is the simulated wall time of one engine step (event timestamps
// and throughput derive from it, so the event stream is deterministic);
// `sim serve` paces its steps to it.
const StepTime = 25 * time.Millisecond

// simEpoch is the simulated clock's origin.
var simEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// NewEngine builds an engine. pub receives the enabled instruments' events
// (nil publishes nothing).
func NewEngine(cfg Config, pub hook.Publisher) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new engine: %w", err)
	}
	if pub == nil {
		pub = hook.PublishFunc(func(hook.Event) {})
	}
	e := &Engine{cfg: cfg, pub: pub, vocab: DefaultVocab(), log: cfg.Log,
		graphs: map[int]*graphPlan{}, buckets: buckets(cfg.CUDAGraphMaxBS),
		wake: make(chan struct{}, 1), newTokRatio: initNewTokenRatio, flagged: map[string]bool{},
		reqs: []*request{nil}, keyBuf: make([]float32, HeadDim), canaryVerify: canaryVerifyEvery}
	if cfg.has(FaultStaleOutLoc) && cfg.TestRetractEvery == 0 {
		// Like SGLANG_TEST_RETRACT: force the retractions the fault needs.
		e.cfg.TestRetractEvery = 20
	}
	e.roomRng = rand.New(rand.NewPCG(cfg.Seed, 0x700d))
	e.xferRng = rand.New(rand.NewPCG(cfg.Seed, 0x7a4f))
	e.specRng = rand.New(rand.NewPCG(cfg.Seed, 0x59ec))
	if cfg.Instruments.Canary {
		e.policy, _ = pagediff.ParsePolicy(cfg.Instruments.CanaryPolicy)
	}
	var err error
	if e.dec, err = NewArena(cfg.IndexKDtype, cfg.PoolTokens/PageTokens+1); err != nil {
		return nil, err
	}
	e.decAlloc = NewAllocator(e.dec.Pages)
	if cfg.Disaggregation == "pd" {
		if e.pre, err = NewArena(cfg.IndexKDtype, cfg.PrefillPoolTokens/PageTokens+1); err != nil {
			return nil, err
		}
		e.preAlloc = NewAllocator(e.pre.Pages)
	}
	e.warmup()
	return e, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Stats returns the scheduler counters so far.
func (e *Engine) Stats() Stats { return e.stats }

// StepNumber is the number of engine steps taken.
func (e *Engine) StepNumber() uint64 { return e.step }

// Now is the engine's clock: Config.Clock, else the simulated clock.
func (e *Engine) Now() time.Time {
	if e.cfg.Clock != nil {
		return e.cfg.Clock()
	}
	return simEpoch.Add(time.Duration(e.step) * StepTime)
}

// Decode arena (tests inspect it at the byte level).
func (e *Engine) DecodeArena() *Arena { return e.dec }

// Submit queues req and returns its handle. Safe for concurrent use.
func (e *Engine) Submit(req Request) (*Handle, error) {
	if len(req.Prompt) == 0 {
		return nil, fmt.Errorf("submit %s: empty prompt", req.ID)
	}
	if len(req.Prompt)+max(req.MaxNewTokens, DefaultMaxNewTokens) >= ContextLen {
		return nil, fmt.Errorf("submit %s: prompt of %d tokens leaves no room in the %d-token context", req.ID, len(req.Prompt), ContextLen)
	}
	if req.Hint < 0 || req.Hint >= len(req.Prompt) {
		return nil, fmt.Errorf("submit %s: hint %d outside the %d-token prompt", req.ID, req.Hint, len(req.Prompt))
	}
	if req.MaxNewTokens <= 0 {
		req.MaxNewTokens = DefaultMaxNewTokens
	}
	r := &request{Request: req, h: &Handle{done: make(chan struct{})}, ptr: req.Hint}
	r.tokens = append(make([]Token, 0, len(req.Prompt)+req.MaxNewTokens), req.Prompt...)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, fmt.Errorf("submit %s: engine closed", req.ID)
	}
	e.inbox = append(e.inbox, r)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return r.h, nil
}

// Idle reports whether the engine has no request anywhere.
func (e *Engine) Idle() bool {
	e.mu.Lock()
	n := len(e.inbox)
	e.mu.Unlock()
	return n == 0 && len(e.queue) == 0 && len(e.bootstrap) == 0 && len(e.xfers) == 0 && len(e.running) == 0
}

// Wake returns a channel that receives after Submit (for Run loops).
func (e *Engine) Wake() <-chan struct{} { return e.wake }

// Close rejects further submissions.
func (e *Engine) Close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
}

func (e *Engine) publish(body hook.Body) {
	e.pub.Publish(hook.Event{Kind: body.Kind(), TS: e.Now().UnixNano(), Src: hook.Source{Proc: "sim"}, Body: body})
}

func (e *Engine) reqID(idx int32) string {
	if idx > 0 && int(idx) < len(e.reqs) && e.reqs[idx] != nil {
		return e.reqs[idx].ID
	}
	return ""
}

// WarmupSeqLen is the seq_len of the warmup request the engine runs at
// start-up (room 0); the checksum analyzer treats rooms this short as warmups.
const WarmupSeqLen = 4

// warmup runs SGLang's fake-bootstrap warmup: room 0, seq_len WarmupSeqLen,
// no real transfer, so its decode-side checksum is 0.
func (e *Engine) warmup() {
	toks := []Token{TokBOS, TokUser, TokHint, TokAssistant}
	if e.pre != nil && e.cfg.Instruments.Checksum {
		pages, _ := e.preAlloc.Alloc(-2, 1, nil)
		for i, t := range toks {
			indexKey(i, t, e.keyBuf)
			e.pre.Store(int(pages[0])*PageTokens+i, e.keyBuf)
		}
		d := kvlayout.Room(e.pre.L, e.pre.Buf, pages, len(toks))
		e.publish(&hook.RoomChecksum{Room: 0, Side: hook.SidePrefill, SeqLen: len(toks), Pages: 1, Bsum: hook.Hex64(d.Bsum), XXH3: hook.Hex64(d.XXH3), Dtype: e.cfg.IndexKDtype, Request: "warmup"})
		e.publish(&hook.RoomChecksum{Room: 0, Side: hook.SideDecode, SeqLen: len(toks), Pages: 1, Dtype: e.cfg.IndexKDtype, Request: "warmup"})
		e.preAlloc.Free(pages)
	}
}

// Step advances the engine by one scheduler iteration: admit, prefill,
// schedule the decode batch (growing or retracting), bootstrap transfers,
// replay one decode step while in-flight chunks land, and finish requests.
// It returns the requests that finished in this step, in batch order.
func (e *Engine) Step() []Completion {
	e.step++
	e.stats.Steps = e.step
	e.admit()
	e.completeTransfers()
	e.prefill()
	batch := e.scheduleBatch()
	e.startTransfers()
	var done []Completion
	if len(batch) > 0 {
		done = e.decode(batch)
	} else {
		e.landChunks(false)
	}
	e.logStep(len(batch))
	return done
}

func (e *Engine) admit() {
	e.mu.Lock()
	in := e.inbox
	e.inbox = nil
	e.mu.Unlock()
	for _, r := range in {
		r.idx = int32(len(e.reqs))
		e.reqs = append(e.reqs, r)
		e.stats.Requests++
		r.state = stQueued
		e.queue = append(e.queue, r)
	}
}

func (e *Engine) newRoom() uint64 {
	for {
		if v := e.roomRng.Uint64() >> 1; v != 0 {
			return v
		}
	}
}

// writeKeys computes index keys of positions [0, n) of r into arena pages.
func (e *Engine) writeKeys(a *Arena, pages []uint32, toks []Token) {
	for pos, t := range toks {
		indexKey(pos, t, e.keyBuf)
		a.Store(int(pages[pos/PageTokens])*PageTokens+pos%PageTokens, e.keyBuf)
	}
}

func pagesFor(tokens int) int { return (tokens + PageTokens - 1) / PageTokens }

// reserveTokens is the decode room the running requests are expected to
// still need (SGLang's new_token_ratio estimate).
func (e *Engine) reserveTokens() int {
	n := 0
	for _, r := range e.running {
		n += int(float64(r.MaxNewTokens-r.nGen) * e.newTokRatio)
	}
	for _, x := range e.xfers {
		n += int(float64(x.r.MaxNewTokens) * e.newTokRatio)
	}
	return n
}

// canAdmitDecode reports whether a request needing need pages fits the
// decode pool and the running limit.
func (e *Engine) canAdmitDecode(need int) bool {
	if len(e.running)+len(e.xfers) >= e.cfg.MaxRunningRequests {
		return false
	}
	free := e.decAlloc.FreePages()*PageTokens - e.reserveTokens()
	return free >= need*PageTokens
}

func (e *Engine) prefill() {
	budget := e.cfg.PrefillTokensPerStep
	for len(e.queue) > 0 && budget > 0 {
		r := e.queue[0]
		n := len(r.tokens)
		need := pagesFor(n)
		if e.pre == nil {
			// Single server: prefill straight into decode pages.
			if !e.canAdmitDecode(need) {
				return
			}
			r.pages, _ = e.decAlloc.Alloc(r.idx, need, r.pages[:0])
			r.room = e.newRoom()
			e.writeKeys(e.dec, r.pages, r.tokens)
			e.knownWrite(r.pages, r.ID)
			// No transfer, so no room checksums: there is nothing to compare.
			r.state = stRunning
			e.running = append(e.running, r)
		} else {
			var ok bool
			if r.ppages, ok = e.preAlloc.Alloc(r.idx, need, r.ppages[:0]); !ok {
				return
			}
			r.room = e.newRoom()
			e.writeKeys(e.pre, r.ppages, r.tokens)
			e.emitRoom(e.pre, r.ppages, r, hook.SidePrefill)
			r.state = stPrefilled
			e.bootstrap = append(e.bootstrap, r)
		}
		e.stats.PrefillTokens += int64(n)
		budget -= n
		e.queue = e.queue[1:]
	}
}

func (e *Engine) emitRoom(a *Arena, pages []uint32, r *request, side hook.Side) {
	if !e.cfg.Instruments.Checksum {
		return
	}
	n := len(r.tokens)
	d := kvlayout.Room(a.L, a.Buf, pages, n)
	ps := kvlayout.RoomPages(a.L, a.Buf, pages, n, nil)
	sums := make([]hook.Hex64, len(ps))
	for i, v := range ps {
		sums[i] = hook.Hex64(v)
	}
	e.publish(&hook.RoomChecksum{Room: hook.Dec64(r.room), Side: side, SeqLen: n, Pages: pagesFor(n),
		Bsum: hook.Hex64(d.Bsum), XXH3: hook.Hex64(d.XXH3), Dtype: e.cfg.IndexKDtype, Request: r.ID, PageSum: sums})
}

// startTransfers allocates decode pages for prefilled requests (in order)
// and posts their chunks.
func (e *Engine) startTransfers() {
	// The prealloc queue admits, in order, every pending request that fits
	// (looking a few entries past one that does not), so a full pool is
	// packed to the brim as SGLang's decode prealloc does.
	for i := 0; i < len(e.bootstrap) && i < prefillLookahead; {
		r := e.bootstrap[i]
		need := len(r.ppages)
		if !e.canAdmitDecode(need) {
			i++
			continue
		}
		e.bootstrap = slices.Delete(e.bootstrap, i, i+1)
		r.pages, _ = e.decAlloc.Alloc(r.idx, need, r.pages[:0])
		x := &transfer{r: r}
		per := e.cfg.TransferPagesPerStep
		// Chunks queue behind the transfers already in flight.
		backlog := 0
		for _, o := range e.xfers {
			for _, c := range o.chunks {
				if !c.landed {
					backlog += len(c.dst)
				}
			}
		}
		for i := 0; i < need; i += e.cfg.TransferChunkPages {
			j := min(i+e.cfg.TransferChunkPages, need)
			lat := uint64(1 + (backlog+j)/per)
			if e.xferRng.IntN(4) == 0 {
				lat++ // network jitter
			}
			x.chunks = append(x.chunks, chunk{src: r.ppages[i:j], dst: r.pages[i:j], land: e.step + lat})
		}
		for _, p := range r.pages {
			e.decAlloc.incoming[p] = true
		}
		r.state = stTransfer
		r.xfer = x
		e.xfers = append(e.xfers, x)
	}
}

// landChunks copies every chunk due at this step into the decode arena. It
// runs while the decode step replays (the transfer engine is asynchronous),
// or on its own in a step without a batch (inReplay false: a write between
// replays, which the between-phase canary must know of).
func (e *Engine) landChunks(inReplay bool) {
	for _, x := range e.xfers {
		for i := range x.chunks {
			c := &x.chunks[i]
			if c.landed || c.land > e.step {
				continue
			}
			for k := range c.dst {
				e.dec.CopyPage(c.dst[k], e.pre, c.src[k])
			}
			if !inReplay {
				e.knownWrite(c.dst, x.r.ID)
			}
			c.landed = true
			x.nLanded++
		}
	}
}

// transferPages appends the decode pages with a chunk still in flight.
func (e *Engine) transferPages(dst []uint32) []uint32 {
	for _, x := range e.xfers {
		for _, c := range x.chunks {
			if !c.landed {
				dst = append(dst, c.dst...)
			}
		}
	}
	return dst
}

// completeTransfers signals completion of finished transfers: the decode
// side checksums the room and the request joins the running batch. A
// transfer whose every chunk landed is retired (prefill pages freed).
func (e *Engine) completeTransfers() {
	keep := e.xfers[:0]
	for _, x := range e.xfers {
		r := x.r
		n := len(x.chunks)
		signal := x.nLanded == n
		if e.cfg.has(FaultTransferRace) && n > 0 && x.nLanded >= n-1 {
			// The completion notification counts the last chunk as done
			// once it is posted: it may not have landed yet.
			signal = true
		}
		if signal && !x.completed {
			x.completed = true
			if e.testComplete != nil {
				e.testComplete(x)
			}
			e.emitRoom(e.dec, r.pages, r, hook.SideDecode)
			for _, p := range r.pages {
				e.decAlloc.incoming[p] = false
			}
			r.state = stRunning
			e.running = append(e.running, r)
		}
		if x.nLanded == n {
			e.preAlloc.Free(r.ppages)
			r.ppages = r.ppages[:0]
			r.xfer = nil
			continue
		}
		keep = append(keep, x)
	}
	e.xfers = keep
}

// retract frees r's decode pages and requeues it for re-prefill.
func (e *Engine) retract(r *request) {
	e.decAlloc.Free(r.pages)
	r.pages = r.pages[:0]
	r.retractions++
	r.state = stQueued
	e.queue = append([]*request{r}, e.queue...)
	e.stats.Retractions++
}

// scheduleBatch forms this step's decode batch: every running request gets
// a slot for its next token; when the pool cannot grow one, the most
// recently admitted requests are retracted (SGLang's retract_decode). With
// stale-outloc the rows of requests retracted here were already launched
// with stale-outloc the vacated rows of the last replayed graph keep their
// out_loc (see vacate).
func (e *Engine) scheduleBatch() (batch []*request) {
	retracted := 0
	oldRatio := e.newTokRatio
	// Forced retraction for tests (SGLANG_TEST_RETRACT).
	if every := e.cfg.TestRetractEvery; every > 0 && len(e.running) > 10 && e.step%uint64(every) == 0 {
		// The victim is the newest running request, as retract_decode picks.
		v := e.running[len(e.running)-1]
		e.running = e.running[:len(e.running)-1]
		e.vacate(len(e.running))
		e.retract(v)
		retracted++
	}
	// Decode memory check: the pool must hold every running request's next
	// retractDecodeSteps tokens; otherwise retract the newest requests
	// until it does (modelled on SGLang's retract_decode target).
	for len(e.running) > 1 && e.decAlloc.FreePages()*PageTokens < len(e.running)*retractDecodeSteps {
		v := e.running[len(e.running)-1]
		e.running = e.running[:len(e.running)-1]
		e.vacate(len(e.running))
		e.retract(v)
		retracted++
	}
	for i := 0; i < len(e.running); i++ {
		r := e.running[i]
		pos := len(r.tokens)
		if pos/PageTokens < len(r.pages) {
			continue
		}
		for {
			var ok bool
			if r.pages, ok = e.decAlloc.Alloc(r.idx, 1, r.pages); ok {
				break
			}
			// Pool full: retract the newest request (possibly r itself).
			v := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.vacate(len(e.running))
			e.retract(v)
			retracted++
			if v == r {
				break
			}
		}
	}
	if retracted > 0 {
		e.newTokRatio = min(1, e.newTokRatio+0.3)
		e.logf("KV cache pool is full. Retract requests. #retracted_reqs: %d, #new_token_ratio: %.4f -> %.4f", retracted, oldRatio, e.newTokRatio)
		if e.cfg.Instruments.Sched {
			e.publish(&hook.Sched{Phase: "retract", RunningReq: len(e.running), QueueReq: len(e.queue) + len(e.bootstrap),
				Tokens: e.decAlloc.UsedPages() * PageTokens, TokenUsage: e.tokenUsage(), Retracted: retracted, NewTokenRatio: e.newTokRatio, CUDAGraph: !e.cfg.DisableCUDAGraph})
		}
	} else {
		e.newTokRatio = max(minNewTokenRatio, e.newTokRatio-newTokenRatioDecay)
	}
	batch = e.running
	for _, r := range batch {
		r.outSlot = e.slotOf(r, len(r.tokens))
		r.finalSlot = r.outSlot
	}
	if k := e.cfg.specTopK(); k >= 2 {
		e.draftSlots(batch, k)
	}
	return batch
}

// vacate is called when the request in batch row row is retracted. The
// captured graph's out_cache_loc input buffer is persistent: a row beyond
// the batch size is a padded row and must be pointed back at slot 0. The
// finish path does that on every replay; with stale-outloc the retraction
// path forgets, so the vacated row keeps the retracted request's last
// out_loc — a slot in a page just freed — and every replay of that graph
// with the row padded stores the padding key there.
func (e *Engine) vacate(row int) {
	if !e.cfg.has(FaultStaleOutLoc) {
		return
	}
	if g := e.graphs[e.lastBucket]; g != nil && row < g.bucket {
		g.stale[row] = true
	}
}

func (e *Engine) slotOf(r *request, pos int) int {
	return int(r.pages[pos/PageTokens])*PageTokens + pos%PageTokens
}

func (e *Engine) tokenUsage() float64 {
	return float64(e.decAlloc.UsedPages()) / float64(e.dec.Pages-1)
}

func (e *Engine) logf(format string, args ...any) {
	if e.log == nil {
		return
	}
	// Local time, as SGLang logs it (logs scan and repro --server-log read
	// it with --tz, by default the local zone).
	fmt.Fprintf(e.log, "[%s TP0] "+format+"\n", append([]any{e.Now().In(time.Local).Format("2006-01-02 15:04:05")}, args...)...)
}

func (e *Engine) logStep(bs int) {
	e.stats.PeakRunningReq = max(e.stats.PeakRunningReq, bs)
	e.stats.PeakTokenUsage = max(e.stats.PeakTokenUsage, e.tokenUsage())
	e.tokensWindow += bs
	if e.step%uint64(e.cfg.DecodeLogInterval) != 0 {
		return
	}
	thr := float64(e.tokensWindow) / (float64(e.cfg.DecodeLogInterval) * StepTime.Seconds())
	e.tokensWindow = 0
	graph := bs > 0 && !e.cfg.DisableCUDAGraph && bs <= e.cfg.CUDAGraphMaxBS
	tg := "False"
	if graph {
		tg = "True"
	}
	used := e.decAlloc.UsedPages() * PageTokens
	e.logf("Decode batch, #running-req: %d, #token: %d, token usage: %.2f, cuda graph: %s, gen throughput (token/s): %.2f, #queue-req: %d",
		bs, used, e.tokenUsage(), tg, thr, len(e.queue)+len(e.bootstrap))
	if e.cfg.Instruments.Sched {
		e.publish(&hook.Sched{Phase: "decode", RunningReq: bs, QueueReq: len(e.queue) + len(e.bootstrap), Tokens: used,
			TokenUsage: e.tokenUsage(), CUDAGraph: graph, GenThroughput: thr})
	}
}

func (e *Engine) finish(r *request, reason, errText string) Completion {
	out := slices.Clone(r.tokens[len(r.Prompt):])
	if reason == "stop" && len(out) > 0 && out[len(out)-1] == TokEOS {
		out = out[:len(out)-1]
	}
	c := Completion{ID: r.ID, Session: r.Session, Round: r.Round, Room: r.room, Tokens: out,
		Text: e.vocab.Decode(out), FinishReason: reason, Err: errText, Retractions: r.retractions, Step: e.step}
	if r.Expected != nil {
		c.Deviated = !slices.Equal(out, r.Expected) || reason != "stop"
	}
	e.decAlloc.Free(r.pages)
	r.pages = nil
	r.state = stDone
	r.h.c = c
	close(r.h.done)
	e.reqs[r.idx] = nil
	return c
}

// Serve steps the engine until ctx ends: while any request is in flight it
// steps back to back, otherwise it waits for a Submit. Results reach
// submitters through their Handles. Call it from one goroutine only (it is
// the engine's Step loop); Submit may be called concurrently.
func (e *Engine) Serve(ctx context.Context) error {
	for {
		if e.Idle() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-e.wake:
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		e.Step()
	}
}
