package model

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vkinfer/vkinfer/model/sample"
)

// ErrContextFull is wrapped by the errors of Session.Eval and
// Session.Generate when the tokens to hold do not fit the context.
var ErrContextFull = errors.New("the context is full")

// Session is the conversation whose tokens one sequence of the model's KV
// cache holds. Each sequence holds one session at a time: NewSession takes
// sequence 0 over (NewSessions the first n), and a session it was taken
// from starts again from nothing. The sessions of different sequences live
// side by side, and Step decodes them together.
//
// Eval keeps the longest prefix of the new tokens the cache already holds
// and runs only the rest. Sliding-window layers keep rings (Cache.Slots):
// once positions beyond the kept prefix have been written, a ring slot a
// kept position needs may hold a later one. The session remembers which
// position each ring slot holds and re-evaluates everything when a slot the
// new tokens would read was overwritten.
type Session struct {
	m      *Model
	seq    int // the sequence of the cache it holds
	tokens []int32
	rings  []ring
}

// ring is what the slots of the sliding layers of one (window, slots)
// geometry hold.
type ring struct {
	window int
	pos    []int // pos[s]: the position slot s holds, -1 when none
}

// NewSession returns an empty session that owns sequence 0 of the model's
// cache, forgetting whatever it held.
func (m *Model) NewSession() *Session { return m.newSession(0) }

// NewSessions returns n empty sessions that own sequences 0 … n-1 of the
// model's cache (n at most Seqs), forgetting whatever they held.
func (m *Model) NewSessions(n int) ([]*Session, error) {
	if n < 1 || n > m.Seqs {
		return nil, fmt.Errorf("model: %d sessions, the KV cache holds %d sequences", n, m.Seqs)
	}
	ss := make([]*Session, n)
	for i := range ss {
		ss[i] = m.newSession(i)
	}
	return ss, nil
}

func (m *Model) newSession(seq int) *Session {
	s := &Session{m: m, seq: seq}
	seen := map[[2]int]bool{}
	for l := range m.Cache.Layers {
		w, n := m.Cache.Window(l), m.Cache.Slots(l)
		if w <= 0 || seen[[2]int{w, n}] {
			continue
		}
		seen[[2]int{w, n}] = true
		s.rings = append(s.rings, ring{window: w, pos: make([]int, n)})
	}
	s.Reset()
	m.owner[seq] = s
	return s
}

// Tokens returns the tokens whose K/V the cache holds, in order (positions
// 0 … len-1). The slice must not be changed.
func (s *Session) Tokens() []int32 {
	s.claim()
	return s.tokens
}

// Reset empties the session (the cache's contents are forgotten, not
// cleared: every position is written before it is read).
func (s *Session) Reset() {
	s.tokens = s.tokens[:0]
	for _, r := range s.rings {
		for i := range r.pos {
			r.pos[i] = -1
		}
	}
}

// claim makes s the session its sequence holds, empty if another session
// used the sequence since.
func (s *Session) claim() {
	if s.m.owner[s.seq] != s {
		s.Reset()
		s.m.owner[s.seq] = s
	}
}

// Eval makes the cache hold tokens: it keeps the longest prefix the cache
// already holds (where the rings allow, see Session) and runs only the rest
// through Forward. It returns the logits of the last token (reused by the
// next Forward) and how many tokens were reused; len(tokens)-reused were
// prefilled. The last token is always evaluated, its logits being needed.
// Tokens that do not fit the context give an error wrapping ErrContextFull,
// and the session keeps what it held.
func (s *Session) Eval(tokens []int32) (logits []float32, reused int, err error) {
	s.claim()
	if len(tokens) == 0 {
		return nil, 0, fmt.Errorf("model: no tokens to evaluate")
	}
	if len(tokens) > s.m.Context {
		return nil, 0, fmt.Errorf("model: %d tokens exceed the context of %d: %w", len(tokens), s.m.Context, ErrContextFull)
	}
	keep := min(commonPrefix(s.tokens, tokens), len(tokens)-1)
	if !s.intact(keep) {
		keep = 0
	}
	s.tokens = s.tokens[:keep]
	logits, err = s.run(tokens[keep:])
	return logits, keep, err
}

// run evaluates tokens after those the session holds and appends them.
// After an error the cache's state past the held prefix is unknown: the
// session keeps only what it held before.
func (s *Session) run(tokens []int32) ([]float32, error) {
	pos := len(s.tokens)
	logits, err := s.m.forward(tokens, s.seq, pos, false)
	s.wrote(pos, len(tokens))
	if err != nil {
		return nil, err
	}
	s.tokens = append(s.tokens, tokens...)
	return logits, nil
}

// wrote marks the ring slots of positions pos … pos+n-1 written: whatever
// ran, they may have been.
func (s *Session) wrote(pos, n int) {
	for _, r := range s.rings {
		for p := pos; p < pos+n; p++ {
			r.pos[p%len(r.pos)] = p
		}
	}
}

// Next says whether tokens are what the session holds and one more token
// that Step can decode (the rings still hold what it reads), and returns
// that token.
func (s *Session) Next(tokens []int32) (int32, bool) {
	s.claim()
	n := len(s.tokens)
	if len(tokens) != n+1 || commonPrefix(s.tokens, tokens) != n || s.decodable() != nil {
		return 0, false
	}
	return tokens[n], true
}

// decodable says why Step cannot decode a token after what s holds: the
// context is full, or a ring no longer holds a position the token reads
// (after an error; Eval re-evaluates then). nil when it can.
func (s *Session) decodable() error {
	n := len(s.tokens)
	if n+1 > s.m.Context {
		return fmt.Errorf("a token after %d exceeds the context of %d: %w", n, s.m.Context, ErrContextFull)
	}
	if !s.intact(n) {
		return fmt.Errorf("the rings no longer hold the positions a token after %d reads", n)
	}
	return nil
}

// Step runs one forward pass that decodes tokens[i] after what sessions[i]
// holds, every session at its own position in its own sequence, and
// appends the tokens to them. It returns n_vocab logits per session, in
// order (reused by the next forward pass). The sessions must be of m and
// of distinct sequences, each with room for a token (an error wrapping
// ErrContextFull otherwise); after an error each keeps only what it held.
func (m *Model) Step(sessions []*Session, tokens []int32) ([]float32, error) {
	n := len(sessions)
	if n == 0 || len(tokens) != n {
		return nil, fmt.Errorf("model: a step of %d sessions and %d tokens", n, len(tokens))
	}
	seqs, pos := m.rows(n)
	for i, s := range sessions {
		if s.m != m {
			return nil, fmt.Errorf("model: step: session %d belongs to another model", i)
		}
		s.claim()
		if err := s.decodable(); err != nil {
			return nil, fmt.Errorf("model: step: session %d: %w", i, err)
		}
		for j := range i {
			if sessions[j].seq == s.seq {
				return nil, fmt.Errorf("model: step: sessions %d and %d hold the same sequence", j, i)
			}
		}
		seqs[i], pos[i] = int32(s.seq), int32(len(s.tokens))
	}
	if n == 1 {
		// One sequence decodes with the ordinary one-token program.
		return sessions[0].run(tokens)
	}
	p, err := m.rowProgram(n, n)
	if err != nil {
		return nil, err
	}
	if cap(m.out) < n*m.HP.Vocab {
		m.out = make([]float32, n*m.HP.Vocab)
	}
	out := m.out[:n*m.HP.Vocab]
	err = p.RunRows(tokens, seqs, pos, out)
	for i, s := range sessions {
		s.wrote(int(pos[i]), 1)
	}
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	for i, s := range sessions {
		s.tokens = append(s.tokens, tokens[i])
	}
	return out, nil
}

// EvalBatch makes each sessions[i] hold tokens[i], as Eval does for one
// session, in as few forward passes as it can: what each session lacks
// (a new prompt past the prefix it keeps, or the one token of a decoding
// sequence) runs beside the others' in row programs of up to UBatch rows,
// each row at its own position of its own sequence. So the prompts of
// requests that arrive together prefill in one pass, with the sequences
// already decoding. A session that lacks more than UBatch tokens prefills
// on its own (Eval's programs, in UBatch pieces).
//
// It returns n_vocab logits per session, those of its last token, in
// order, in a slice the next call reuses, and how many of each session's
// tokens were kept rather than evaluated. The sessions must be of m and of
// distinct sequences; tokens that do not fit the context give an error
// wrapping ErrContextFull. After an error each session keeps only the
// prefix it kept.
func (m *Model) EvalBatch(sessions []*Session, tokens [][]int32) (logits []float32, reused []int, err error) {
	n := len(sessions)
	if n == 0 || len(tokens) != n {
		return nil, nil, fmt.Errorf("model: a batch of %d sessions and %d token lists", n, len(tokens))
	}
	for i, s := range sessions {
		switch {
		case s.m != m:
			return nil, nil, fmt.Errorf("model: batch: session %d belongs to another model", i)
		case len(tokens[i]) == 0:
			return nil, nil, fmt.Errorf("model: batch: session %d has no tokens to evaluate", i)
		case len(tokens[i]) > m.Context:
			return nil, nil, fmt.Errorf("model: batch: session %d: %d tokens exceed the context of %d: %w", i, len(tokens[i]), m.Context, ErrContextFull)
		}
		for j := range i {
			if sessions[j].seq == s.seq {
				return nil, nil, fmt.Errorf("model: batch: sessions %d and %d hold the same sequence", j, i)
			}
		}
	}
	if len(m.reused) < n {
		m.reused = make([]int, n)
	}
	reused = m.reused[:n]
	for i, s := range sessions {
		s.claim()
		keep := min(commonPrefix(s.tokens, tokens[i]), len(tokens[i])-1)
		if !s.intact(keep) {
			keep = 0
		}
		s.tokens, reused[i] = s.tokens[:keep], keep
	}
	vocab := m.HP.Vocab
	if cap(m.batchOut) < n*vocab {
		m.batchOut = make([]float32, n*vocab)
	}
	logits = m.batchOut[:n*vocab]
	// Passes of consecutive sessions whose new tokens fill at most UBatch
	// rows; longer prompts run alone.
	var pass []int
	rows := 0
	flush := func() error {
		defer func() { pass, rows = pass[:0], 0 }()
		return m.evalPass(sessions, tokens, reused, pass, rows, logits)
	}
	for i := range sessions {
		add := len(tokens[i]) - reused[i]
		if add > m.UBatch {
			if err := m.evalPass(sessions, tokens, reused, []int{i}, add, logits); err != nil {
				return nil, nil, err
			}
			continue
		}
		if rows+add > m.UBatch {
			if err := flush(); err != nil {
				return nil, nil, err
			}
		}
		pass, rows = append(pass, i), rows+add
	}
	if len(pass) > 0 {
		if err := flush(); err != nil {
			return nil, nil, err
		}
	}
	return logits, reused, nil
}

// evalPass runs the new tokens of sessions[pass[…]] (rows of them in all)
// in one forward pass, or one session's through its own programs, and
// copies each session's last logits into its place in out.
func (m *Model) evalPass(sessions []*Session, tokens [][]int32, reused, pass []int, rows int, out []float32) error {
	vocab := m.HP.Vocab
	if len(pass) == 1 {
		i := pass[0]
		l, err := sessions[i].run(tokens[i][reused[i]:])
		if err != nil {
			return err
		}
		copy(out[i*vocab:(i+1)*vocab], l)
		return nil
	}
	// Each session's last token first: the program's logits are those of
	// its first len(pass) rows. The other rows only fill the caches.
	toks, seqs, pos := m.rowBuffers(rows)
	r := len(pass)
	for j, i := range pass {
		s, t := sessions[i], tokens[i]
		toks[j], seqs[j], pos[j] = t[len(t)-1], int32(s.seq), int32(len(t)-1)
		for p := reused[i]; p < len(t)-1; p++ {
			toks[r], seqs[r], pos[r] = t[p], int32(s.seq), int32(p)
			r++
		}
	}
	p, err := m.rowProgram(rows, len(pass))
	if err != nil {
		// Most likely the device's memory: a mixed batch's program is as
		// large as a prefill's. Nothing ran, so the sessions prefill one
		// by one instead, after the kept mixed programs are freed.
		m.dropMixed()
		for _, i := range pass {
			if err := m.evalPass(sessions, tokens, reused, []int{i}, len(tokens[i])-reused[i], out); err != nil {
				return err
			}
		}
		return nil
	}
	// Sessions that follow one another in out take the logits in place: a
	// step of 16 sequences of a 128k vocabulary is 8 MB to copy otherwise.
	first, inPlace := pass[0], true
	for j, i := range pass {
		inPlace = inPlace && i == first+j
	}
	var res []float32
	if inPlace {
		res = out[first*vocab : (first+len(pass))*vocab]
	} else {
		if cap(m.out) < len(pass)*vocab {
			m.out = make([]float32, len(pass)*vocab)
		}
		res = m.out[:len(pass)*vocab]
	}
	err = p.RunRows(toks, seqs, pos, res)
	for _, i := range pass {
		sessions[i].wrote(reused[i], len(tokens[i])-reused[i])
	}
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	for j, i := range pass {
		sessions[i].tokens = append(sessions[i].tokens, tokens[i][reused[i]:]...)
		if !inPlace {
			copy(out[i*vocab:(i+1)*vocab], res[j*vocab:(j+1)*vocab])
		}
	}
	return nil
}

// intact reports whether the rings still hold every position that tokens
// evaluated from position keep on would read: keep-W+1 … keep-1 for a
// window W.
func (s *Session) intact(keep int) bool {
	for _, r := range s.rings {
		for p := max(0, keep-r.window+1); p < keep; p++ {
			if r.pos[p%len(r.pos)] != p {
				return false
			}
		}
	}
	return true
}

func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// Generate evaluates prompt through Eval (reusing what the session holds)
// and then samples up to o.N tokens, calling emit with each one before it
// is fed back. Every emitted token but the last is evaluated and appended
// to the session, so a next prompt that repeats the answer reuses it. It
// stops at an end-of-generation token (not emitted, not appended) unless
// o.IgnoreEOS, or when ctx is cancelled; the stats cover what ran either
// way, PromptTokens counting the prefilled tokens only (Reused the others).
func (s *Session) Generate(ctx context.Context, prompt []int32, o GenOptions, smp *sample.Sampler, emit func(id int32) error) (st Stats, err error) {
	m := s.m
	n := o.N
	if len(prompt) == 0 {
		return st, fmt.Errorf("model: empty prompt (no tokens to evaluate)")
	}
	if n < 0 {
		n = m.Context - len(prompt)
	}
	if len(prompt)+n > m.Context {
		return st, fmt.Errorf("model: the prompt (%d tokens) plus %d tokens to generate exceed the context of %d; raise -c or lower -n: %w",
			len(prompt), n, m.Context, ErrContextFull)
	}
	for _, id := range prompt {
		smp.Accept(id)
	}
	t0 := time.Now()
	logits, reused, ferr := s.Eval(prompt)
	st.PromptTokens, st.Reused, st.PromptTime = len(prompt)-reused, reused, time.Since(t0)
	if ferr != nil {
		return st, ferr
	}
	t0 = time.Now()
	defer func() { st.GenTime = time.Since(t0) }()
	for st.GenTokens < n {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		id := smp.Sample(logits)
		st.GenTokens++
		if m.Tok.IsEOG(id) && !o.IgnoreEOS {
			break
		}
		if err := emit(id); err != nil {
			return st, err
		}
		smp.Accept(id)
		if st.GenTokens == n {
			break
		}
		if logits, err = s.run([]int32{id}); err != nil {
			return st, err
		}
	}
	return st, nil
}
