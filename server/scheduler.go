package server

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/vkinfer/vkinfer/model/sample"
)

// Engine evaluates token sequences for the scheduler. It holds Seqs()
// sequences resident at once, each in a KV cache of its own, and decodes
// those of one Eval together where it can (infer serve's engine runs one
// forward pass over every sequence that needs only its newest token).
// With fewer caches than slots the scheduler interleaves the slots on them.
type Engine interface {
	Seqs() int
	// Eval brings, for each entry, cache Cache to hold Tokens and returns
	// the logits after the last token in Logits: only the part of Tokens
	// not already in the cache is evaluated (Reused says how many were).
	// The Logits slices stay valid until the next Eval; the scheduler's
	// samplers change them in place.
	Eval(batch []Seq) error
}

// Seq is one sequence of an Engine.Eval batch.
type Seq struct {
	Cache  int     // which resident sequence, 0 to Seqs()-1
	Tokens []int32 // the whole sequence, not just its new part
	Logits []float32
	Reused int // tokens of Tokens the cache already held
}

// genRequest is what a request asks the scheduler to generate.
type genRequest struct {
	prompt    []int32
	maxTokens int // < 0: until end of generation or a full context
	sampling  sample.Params
	stop      []string
	ignoreEOS bool // end-of-generation tokens are text like any other
	logprobs  int  // alternatives reported per token; < 0: no logprobs
}

// job is a generation request inside the scheduler.
type job struct {
	genRequest
	id      uint64
	ctx     context.Context
	sampler *sample.Sampler
	lp      *logprobs    // nil unless the request asked for logprobs
	sampled tokenLogprob // the entry of the token just sampled
	text    *textStream
	out     *stream

	started   bool // its prompt has been evaluated
	generated int  // tokens sampled, end-of-generation included
	stats     jobStats
}

// jobStats are one request's timings: the first evaluation of its prompt,
// then decoding, which over a single cache includes re-evaluating the
// sequence after another request held the cache (switches).
type jobStats struct {
	promptTokens, reused int
	promptTime, genTime  time.Duration
	switches, reeval     int
}

// slot is one of --parallel conversations. Its tokens are what its KV
// cache holds, or will once the slot runs again: a new request whose
// prompt extends them evaluates only the difference.
type slot struct {
	id       int
	tokens   []int32
	job      *job
	cache    int    // the cache holding it, -1 when none does
	ran      int    // steps run since it got its cache or its request
	lastStep uint64 // the step it last ran in (for fairness)
	lastUsed uint64 // the step its last request ended in
}

// schedulerConfig sets up a scheduler.
type schedulerConfig struct {
	engine   Engine
	model    Model
	parallel int // slots
	queue    int // requests waiting beyond the slots
	// quantum is how many steps a sequence keeps a cache while others
	// wait for it: switching costs re-evaluating the incoming sequence.
	quantum int
	log     io.Writer
}

// scheduler runs the generation loop: each step admits queued requests to
// free slots, gives the engine's caches to active slots, evaluates them in
// one Engine.Eval and samples one token for each.
type scheduler struct {
	cfg   schedulerConfig
	slots []*slot
	owner []int // cache → slot index, -1 when free

	mu       sync.Mutex
	queue    []*job
	inFlight int // queued or in a slot
	nextID   uint64
	closed   bool
	aborted  bool          // cancelAll: every request in flight ends now
	wake     chan struct{} // cap 1: something was queued, or Close
	step     uint64
	idle     chan struct{} // closed by run when it returns
	ids      []int32       // a step's sampled tokens (sample)
}

func newScheduler(cfg schedulerConfig) *scheduler {
	s := &scheduler{cfg: cfg, wake: make(chan struct{}, 1), idle: make(chan struct{})}
	for i := range cfg.parallel {
		s.slots = append(s.slots, &slot{id: i, cache: -1})
	}
	s.owner = make([]int, cfg.engine.Seqs())
	for c := range s.owner {
		s.owner[c] = -1
	}
	return s
}

// submit queues a request; errQueueFull when every slot and queue place is
// taken. The request's results arrive on the returned stream.
func (s *scheduler) submit(ctx context.Context, r genRequest) (*stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errShuttingDown
	}
	if s.inFlight >= s.cfg.parallel+s.cfg.queue {
		return nil, errQueueFull
	}
	s.inFlight++
	s.nextID++
	j := &job{genRequest: r, id: s.nextID, ctx: ctx, sampler: sample.New(r.sampling),
		text: newTextStream(s.cfg.model.NewDecoder(), r.stop), out: newStream()}
	if r.logprobs >= 0 {
		j.lp = &logprobs{top: r.logprobs}
	}
	s.queue = append(s.queue, j)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return j.out, nil
}

// close stops accepting requests; run returns once the ones in flight
// have finished (or been cancelled by their contexts).
func (s *scheduler) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// cancelAll closes the scheduler and ends every request in flight at the
// next step.
func (s *scheduler) cancelAll() {
	s.mu.Lock()
	s.closed, s.aborted = true, true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// cancelled says why j must end now: its client went away, or the server
// is shutting down without waiting; nil if neither.
func (s *scheduler) cancelled(j *job) error {
	if err := j.ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aborted {
		return errShuttingDown
	}
	return nil
}

// run is the loop; it returns after close, once nothing is in flight.
func (s *scheduler) run() {
	defer close(s.idle)
	for {
		s.mu.Lock()
		busy, closed := s.inFlight > 0, s.closed
		s.mu.Unlock()
		if !busy {
			if closed {
				return
			}
			<-s.wake
			continue
		}
		s.advance()
	}
}

// advance is one step.
func (s *scheduler) advance() {
	s.step++
	s.admit()
	for _, sl := range s.slots {
		if j := sl.job; j != nil {
			if err := s.cancelled(j); err != nil {
				s.finish(sl, "cancelled", err)
			}
		}
	}
	batch, slots := s.pick()
	if len(batch) == 0 {
		return
	}
	t0 := time.Now()
	err := s.cfg.engine.Eval(batch)
	took := time.Since(t0)
	if err != nil {
		for _, sl := range slots {
			// What the cache holds is unknown now: start the slot afresh.
			sl.tokens = nil
			s.finish(sl, "error", fmt.Errorf("evaluating slot %d: %w", sl.id, err))
		}
		return
	}
	ids := s.sample(slots, batch)
	for i, sl := range slots {
		s.account(sl.job, &batch[i], took)
		s.take(sl, ids[i])
	}
}

// sample draws each slot's next token from its logits, the slots in
// parallel: a sampler's pass over a large vocabulary costs a fraction of a
// millisecond, which sixteen streams would otherwise pay one after
// another every step. Each job's sampler and logits are its own.
func (s *scheduler) sample(slots []*slot, batch []Seq) []int32 {
	if cap(s.ids) < len(slots) {
		s.ids = make([]int32, len(slots))
	}
	ids := s.ids[:len(slots)]
	one := func(j *job, logits []float32) int32 {
		if j.lp == nil {
			return j.sampler.Sample(logits)
		}
		j.lp.measure(logits)
		id := j.sampler.Sample(logits)
		j.sampled = j.lp.entry(id)
		return id
	}
	if len(slots) == 1 {
		ids[0] = one(slots[0].job, batch[0].Logits)
		return ids
	}
	var wg sync.WaitGroup
	for i, sl := range slots {
		wg.Go(func() { ids[i] = one(sl.job, batch[i].Logits) })
	}
	wg.Wait()
	return ids
}

// admit moves queued requests into free slots, dropping those whose client
// has gone. Each takes the free slot whose tokens share the longest prefix
// with its prompt, where that prefix is at least a tenth of the prompt
// (llama-server's similarity rule); otherwise, or on a tie, the least
// recently used.
func (s *scheduler) admit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue[:0]
	for _, j := range s.queue {
		if err := j.ctx.Err(); err != nil || s.aborted {
			if err == nil {
				err = errShuttingDown
			}
			s.inFlight--
			j.out.end("cancelled", usage{}, err)
			if s.cfg.log != nil {
				fmt.Fprintf(s.cfg.log, "request %d: cancelled in the queue\n", j.id)
			}
			continue
		}
		var best *slot
		bestLen := 0
		for _, sl := range s.slots {
			if sl.job != nil {
				continue
			}
			n := commonPrefix(sl.tokens, j.prompt)
			if 10*n < len(j.prompt) {
				n = 0
			}
			if best == nil || n > bestLen || n == bestLen && sl.lastUsed < best.lastUsed {
				best, bestLen = sl, n
			}
		}
		if best == nil {
			q = append(q, j)
			continue
		}
		best.job, best.ran = j, 0
		best.tokens = append(best.tokens[:0], j.prompt...)
		for _, id := range j.prompt {
			j.sampler.Accept(id)
		}
	}
	clear(s.queue[len(q):])
	s.queue = q
}

func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// pick gives the engine's caches to active slots and returns the step's
// batch. A slot waiting for a cache takes an idle one (whose slot has no
// request) where there is one: a free cache first, else the one whose
// slot's tokens are the oldest, so that recent conversations keep theirs.
// Only when every cache is busy does a slot that has held its cache for a
// quantum give it up to the slot that has waited longest.
func (s *scheduler) pick() ([]Seq, []*slot) {
	for {
		var next *slot
		for _, sl := range s.slots {
			if sl.job != nil && sl.cache < 0 && (next == nil || sl.lastStep < next.lastStep) {
				next = sl
			}
		}
		if next == nil {
			break
		}
		c := s.idleCache()
		if c < 0 {
			for cc, o := range s.owner {
				if r := s.slots[o].ran; r >= s.cfg.quantum && (c < 0 || r > s.slots[s.owner[c]].ran) {
					c = cc
				}
			}
			if c < 0 {
				break
			}
			s.slots[s.owner[c]].job.stats.switches++
		}
		if o := s.owner[c]; o >= 0 {
			s.slots[o].cache = -1
		}
		s.owner[c], next.cache, next.ran = next.id, c, 0
	}
	var batch []Seq
	var slots []*slot
	for c, o := range s.owner {
		if o < 0 || s.slots[o].job == nil {
			continue
		}
		cur := s.slots[o]
		cur.ran++
		cur.lastStep = s.step
		batch = append(batch, Seq{Cache: c, Tokens: cur.tokens})
		slots = append(slots, cur)
	}
	return batch, slots
}

// idleCache returns a cache whose slot has no request, -1 when none: a
// free one first, then the least recently used.
func (s *scheduler) idleCache() int {
	best := -1
	var bestUsed uint64
	for c, o := range s.owner {
		if o < 0 {
			return c
		}
		if sl := s.slots[o]; sl.job == nil && (best < 0 || sl.lastUsed < bestUsed) {
			best, bestUsed = c, sl.lastUsed
		}
	}
	return best
}

// account books an evaluation's time: the first of a request is its
// prompt, any later one decoding (and a re-evaluation where more than the
// newest token had to be evaluated, after a switch).
func (s *scheduler) account(j *job, q *Seq, took time.Duration) {
	evaluated := len(q.Tokens) - q.Reused
	if !j.started {
		j.started = true
		j.stats.promptTokens, j.stats.reused, j.stats.promptTime = len(q.Tokens), q.Reused, took
		return
	}
	j.stats.genTime += took
	if evaluated > 1 {
		j.stats.reeval += evaluated
	}
}

// take appends the token sampled for the slot's job and streams its text,
// ending the job at an end of generation, a stop string or its length.
func (s *scheduler) take(sl *slot, id int32) {
	j := sl.job
	j.generated++
	sl.tokens = append(sl.tokens, id)
	if s.cfg.model.IsEOG(id) && !j.ignoreEOS {
		s.finish(sl, "stop", nil)
		return
	}
	j.sampler.Accept(id)
	text, stopped := j.text.add(id)
	var lp *tokenLogprob
	if j.lp != nil {
		lp = &j.sampled
	}
	if text != "" || lp != nil {
		j.out.push(text, lp)
	}
	switch {
	case stopped:
		s.finish(sl, "stop", nil)
	case j.generated == j.maxTokens || len(sl.tokens) >= s.cfg.model.Context():
		s.finish(sl, "length", nil)
	}
}

// finish ends the slot's request: the held-back text goes out (unless
// the request failed or was cancelled), then the end of the stream, a
// timings line on the log, and the slot is free.
func (s *scheduler) finish(sl *slot, reason string, err error) {
	j := sl.job
	if reason == "stop" || reason == "length" {
		if text := j.text.flush(); text != "" {
			j.out.push(text, nil)
		}
	}
	u := usage{PromptTokens: len(j.prompt), CompletionTokens: j.generated, TotalTokens: len(j.prompt) + j.generated}
	j.out.end(reason, u, err)
	sl.job = nil
	sl.lastUsed = s.step
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
	s.logTimings(sl.id, j, reason)
}

// logTimings writes llama-server's per-request figures on one line.
func (s *scheduler) logTimings(slot int, j *job, reason string) {
	if s.cfg.log == nil {
		return
	}
	st := j.stats
	rate := func(n int, d time.Duration) float64 {
		if d <= 0 {
			return 0
		}
		return float64(n) / d.Seconds()
	}
	fmt.Fprintf(s.cfg.log, "request %d slot %d: prompt %d tokens (%d reused), prefill %d in %.2f ms (%.2f t/s); "+
		"decode %d tokens in %.2f ms (%.2f t/s); %d switches re-evaluated %d tokens; finish %s\n",
		j.id, slot, st.promptTokens, st.reused, st.promptTokens-st.reused, float64(st.promptTime.Microseconds())/1000,
		rate(st.promptTokens-st.reused, st.promptTime), j.generated, float64(st.genTime.Microseconds())/1000,
		rate(max(j.generated-1, 0), st.genTime), st.switches, st.reeval, reason)
}

// stream carries one request's output from the scheduler to its handler
// without ever blocking the scheduler on a slow client: text accumulates
// until the handler takes it.
type stream struct {
	mu       sync.Mutex
	pending  []byte
	logprobs []tokenLogprob // of the tokens whose text is pending or held back
	done     bool
	reason   string // stop, length, cancelled or error
	usage    usage
	err      error
	ready    chan struct{} // cap 1: signalled on every change
}

func newStream() *stream { return &stream{ready: make(chan struct{}, 1)} }

func (st *stream) signal() {
	select {
	case st.ready <- struct{}{}:
	default:
	}
}

// push adds text and, where the request asked for them, the entry of the
// token that produced it (its text may still be held back).
func (st *stream) push(text string, lp *tokenLogprob) {
	st.mu.Lock()
	st.pending = append(st.pending, text...)
	if lp != nil {
		st.logprobs = append(st.logprobs, *lp)
	}
	st.mu.Unlock()
	st.signal()
}

func (st *stream) end(reason string, u usage, err error) {
	st.mu.Lock()
	st.done, st.reason, st.usage, st.err = true, reason, u, err
	st.mu.Unlock()
	st.signal()
}

// streamPart is what the handler takes from a stream.
type streamPart struct {
	text     string
	logprobs []tokenLogprob
	done     bool
	reason   string
	usage    usage
	err      error
}

// next waits for new text or the end (or for ctx) and takes it.
func (st *stream) next(ctx context.Context) (streamPart, error) {
	for {
		st.mu.Lock()
		p := streamPart{text: string(st.pending), logprobs: st.logprobs, done: st.done, reason: st.reason, usage: st.usage, err: st.err}
		st.pending, st.logprobs = st.pending[:0], nil
		st.mu.Unlock()
		if p.text != "" || len(p.logprobs) > 0 || p.done {
			return p, nil
		}
		select {
		case <-st.ready:
		case <-ctx.Done():
			return p, ctx.Err()
		}
	}
}

// usage is OpenAI's token accounting; completion tokens count every token
// sampled, an end-of-generation token included, as llama-server does.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}
