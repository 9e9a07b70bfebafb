package server

import (
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"testing"

	"github.com/vkinfer/vkinfer/model/sample"
)

// The fake model reads text as bytes: ids 0-255 are bytes, then BOS and
// EOS.
const (
	fakeBOS   = 256
	fakeEOS   = 257
	fakeVocab = 258
)

type fakeModel struct{ ctx int }

func (m fakeModel) Name() string   { return "fake" }
func (m fakeModel) Context() int   { return m.ctx }
func (m fakeModel) VocabSize() int { return fakeVocab }
func (m fakeModel) IsEOG(id int32) bool {
	return id == fakeEOS
}
func (m fakeModel) NewDecoder() Decoder { return &byteDecoder{} }
func (m fakeModel) Piece(id int32) string {
	switch {
	case id < 256:
		return string([]byte{byte(id)})
	case id == fakeBOS:
		return "<s>"
	}
	return "</s>"
}

func (m fakeModel) Tokenize(text string) []int32 {
	ids := []int32{fakeBOS}
	for _, b := range []byte(text) {
		ids = append(ids, int32(b))
	}
	return ids
}

// ApplyTemplate is a ChatML-like template; a message with the role
// "fail" cannot be rendered.
func (m fakeModel) ApplyTemplate(msgs []Message) (string, error) {
	var b strings.Builder
	for _, msg := range msgs {
		fmt.Fprintf(&b, "<%s>%s\n", msg.Role, msg.Content)
	}
	return b.String() + "<assistant>", nil
}

type byteDecoder struct{}

func (byteDecoder) Add(id int32) string {
	if id < 256 {
		return string([]byte{byte(id)})
	}
	return ""
}
func (byteDecoder) Flush() string { return "" }

// alphabet is what the fake engine generates: '.' is followed by EOS
// when eos is on.
const alphabet = "abcdefghijklmnopqrstuvwxyz ."

// fakeEngine computes logits from the sequence's length and last four
// tokens, so that a sequence mixed up with another or evaluated at the
// wrong length gives other tokens. Each cache remembers its tokens and
// reports the common prefix as reused.
type fakeEngine struct {
	seqs int
	eos  bool
	// gate, when set, is received from before every Eval: tests hold the
	// scheduler still with it.
	gate chan struct{}

	mu     sync.Mutex
	caches [][]int32
	calls  []Seq // every Eval entry, Tokens copied
	widest int   // the most entries of one Eval
	logits [][]float32
}

func newFakeEngine(seqs int, eos bool) *fakeEngine {
	return &fakeEngine{seqs: seqs, eos: eos, caches: make([][]int32, seqs)}
}

func (e *fakeEngine) Seqs() int { return e.seqs }

func (e *fakeEngine) Eval(batch []Seq) error {
	e.mu.Lock()
	gate := e.gate
	e.mu.Unlock()
	if gate != nil {
		<-gate
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.widest = max(e.widest, len(batch))
	for len(e.logits) < len(batch) {
		e.logits = append(e.logits, make([]float32, fakeVocab))
	}
	for i := range batch {
		q := &batch[i]
		if q.Cache < 0 || q.Cache >= e.seqs {
			return fmt.Errorf("cache %d of %d", q.Cache, e.seqs)
		}
		// The last token is always evaluated: its logits are the output.
		q.Reused = min(commonPrefix(e.caches[q.Cache], q.Tokens), len(q.Tokens)-1)
		e.caches[q.Cache] = append(e.caches[q.Cache][:0], q.Tokens...)
		q.Logits = e.logits[i]
		fakeLogits(q.Tokens, e.eos, q.Logits)
		e.calls = append(e.calls, Seq{Cache: q.Cache, Tokens: append([]int32(nil), q.Tokens...), Reused: q.Reused})
	}
	return nil
}

func fakeLogits(tokens []int32, eos bool, out []float32) {
	for i := range out {
		out[i] = -100
	}
	if eos && tokens[len(tokens)-1] == '.' {
		out[fakeEOS] = 10
		return
	}
	h := fnv.New64a()
	fmt.Fprint(h, len(tokens), tokens[max(len(tokens)-4, 0):])
	x := h.Sum64()
	// Every letter gets a logit, so that temperature and seeds matter.
	for _, c := range []byte(alphabet) {
		x = x*6364136223846793005 + 1442695040888963407
		out[c] = float32(x>>40) / float32(1<<24) * 4
	}
}

// fakeGreedy is what the fake model generates after prompt, run directly:
// the reference a served request must equal.
func fakeGreedy(prompt string, sp sample.Params, maxTokens, ctx int, eos bool) string {
	tokens := fakeModel{}.Tokenize(prompt)
	s := sample.New(sp)
	for _, id := range tokens {
		s.Accept(id)
	}
	var b strings.Builder
	logits := make([]float32, fakeVocab)
	for n := 0; n != maxTokens && len(tokens) < ctx; n++ {
		fakeLogits(tokens, eos, logits)
		id := s.Sample(logits)
		if id == fakeEOS {
			break
		}
		s.Accept(id)
		tokens = append(tokens, id)
		b.WriteByte(byte(id))
	}
	return b.String()
}

// newFake starts a server on the fake model and engine.
func newFake(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.Model == nil {
		cfg.Model = fakeModel{ctx: 256}
	}
	if cfg.Engine == nil {
		cfg.Engine = newFakeEngine(1, true)
	}
	if cfg.Parallel == 0 {
		cfg.Parallel = 1
	}
	if cfg.Defaults == (sample.Params{}) {
		cfg.Defaults = sample.Defaults()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
