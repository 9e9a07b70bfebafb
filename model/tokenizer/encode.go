package tokenizer

import "strings"

// spaceMarker is SentencePiece's visible space, U+2581 "▁".
const spaceMarker = "\u2581"

// Encode tokenizes text. With addSpecial, BOS and EOS are added as the
// metadata asks (AddBOS, tokenizer.ggml.add_eos_token). With parseSpecial,
// the texts of control tokens (e.g. "<|eot_id|>") in the input become those
// tokens; user-defined tokens are matched either way. Any byte string is
// accepted: SentencePiece falls back to byte tokens, and BPE, as llama.cpp,
// reads each invalid UTF-8 byte as U+FFFD.
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	var out []int32
	if addSpecial && t.addBOS {
		out = append(out, t.bos)
	}
	frags := t.partition(text, parseSpecial)
	var m merger
	switch t.model {
	case modelSPM:
		// SentencePiece prefixes a space to the text at the start and after
		// each special token, as if each began a new sentence.
		prevSpecial := true
		for _, f := range frags {
			if f.id >= 0 {
				out = append(out, f.id)
				prevSpecial = true
				continue
			}
			piece := text[f.start:f.end]
			if t.addSpacePrefix && prevSpecial {
				piece = " " + piece
			}
			out = m.encodeSPM(t, strings.ReplaceAll(piece, " ", spaceMarker), out)
			prevSpecial = false
		}
	case modelBPE:
		var sp splitter
		for _, f := range frags {
			if f.id >= 0 {
				out = append(out, f.id)
				continue
			}
			out = m.encodeBPE(t, &sp, text[f.start:f.end], out)
		}
	}
	if addSpecial && t.addEOS {
		out = append(out, t.eos)
	}
	return out
}

// utf8SeqLen is the length of the UTF-8 sequence a lead byte announces,
// from its high nibble alone as llama.cpp's unicode_len_utf8: continuation
// bytes count 1, and 0xF8-0xFF claim 4 like any 0xF_ byte.
func utf8SeqLen(b byte) int {
	switch b >> 4 {
	case 0xC, 0xD:
		return 2
	case 0xE:
		return 3
	case 0xF:
		return 4
	}
	return 1
}

// symbol is a run of bytes text[start:start+n] in a doubly linked list of
// the symbols left after merging; n == 0 marks one merged into its left
// neighbour.
type symbol struct{ start, n, prev, next int }

// splitSymbols cuts text into one symbol per (claimed) UTF-8 character.
func splitSymbols(text string, syms []symbol) []symbol {
	syms = syms[:0]
	for off := 0; off < len(text); {
		n := min(utf8SeqLen(text[off]), len(text)-off)
		syms = append(syms, symbol{start: off, n: n, prev: len(syms) - 1, next: len(syms) + 1})
		off += n
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	return syms
}

// bigram is a candidate merge of symbols left and right, whose joined text
// is size bytes long; the lowest prio is merged first, then the leftmost.
type bigram struct {
	left, right, size int
	prio              float64 // exact for both float32 scores and int32 ranks
}

func (a bigram) before(b bigram) bool {
	return a.prio < b.prio || (a.prio == b.prio && a.left < b.left)
}

// merger runs the merge loop both algorithms share (llama.cpp's
// llm_tokenizer_spm_session and llm_tokenizer_bpe_session differ only in
// what a pair is worth and in how leftovers are emitted).
type merger struct {
	syms  []symbol
	queue bigramHeap
}

// pairPrio values joining symbols l and r of text; ok is false when they
// may not be joined.
type pairPrio func(t *Tokenizer, text string, l, r symbol) (prio float64, ok bool)

// run splits text into characters, queues every adjacent pair and then
// repeatedly joins the best live pair, queueing the pairs it forms with its
// new neighbours. The result is the symbol list from first().
func (m *merger) run(t *Tokenizer, text string, value pairPrio) {
	m.syms = splitSymbols(text, m.syms)
	m.queue.reset()
	try := func(left, right int) {
		if left < 0 || right < 0 {
			return
		}
		l, r := m.syms[left], m.syms[right]
		if p, ok := value(t, text, l, r); ok {
			m.queue.push(bigram{left: left, right: right, size: l.n + r.n, prio: p})
		}
	}
	for i := 1; i < len(m.syms); i++ {
		try(i-1, i)
	}
	for m.queue.len() > 0 {
		b := m.queue.pop()
		// The pair is stale when either symbol has been merged since it was
		// queued: both still live with the same total length means both are
		// untouched (symbols only grow, and only into their right
		// neighbour), so the length test equals llama.cpp's text comparison.
		l, r := &m.syms[b.left], &m.syms[b.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != b.size {
			continue
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			m.syms[r.next].prev = b.left
		}
		try(l.prev, b.left)
		try(b.left, l.next)
	}
}

// first returns the index of the first symbol, or -1 when there is none;
// the rest follow through next.
func (m *merger) first() int {
	if len(m.syms) == 0 {
		return -1
	}
	return 0
}

// spmPrio: SentencePiece joins two symbols when their joined text is a
// token, highest score first.
func spmPrio(t *Tokenizer, text string, l, r symbol) (float64, bool) {
	id, ok := t.ids[text[l.start:l.start+l.n+r.n]]
	if !ok {
		return 0, false
	}
	return -float64(t.scores[id]), true
}

// bpePrio: BPE joins two symbols when they form a merge, lowest rank first.
func bpePrio(t *Tokenizer, text string, l, r symbol) (float64, bool) {
	rank, ok := t.merges[mergePair{text[l.start : l.start+l.n], text[r.start : r.start+r.n]}]
	return float64(rank), ok
}

// encodeSPM runs llama.cpp's SentencePiece algorithm on text (spaces already
// replaced by ▁): start from characters and repeatedly join the adjacent pair
// whose joined text is the highest-scoring token; characters left without a
// token become byte tokens.
func (m *merger) encodeSPM(t *Tokenizer, text string, out []int32) []int32 {
	m.run(t, text, spmPrio)
	// Every joined symbol is a token (only token texts are queued), so only
	// single characters can miss; llama.cpp's rev_merge lookup never applies.
	for i := m.first(); i >= 0; i = m.syms[i].next {
		sym := m.syms[i]
		piece := text[sym.start : sym.start+sym.n]
		if id, ok := t.ids[piece]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(piece); j++ {
			if id := t.byteTokens[piece[j]]; id >= 0 {
				out = append(out, id)
			} else if t.unk >= 0 {
				// llama.cpp aborts on a vocabulary without byte tokens; the
				// unknown token is the graceful equivalent.
				out = append(out, t.unk)
			}
		}
	}
	return out
}

// encodeBPE pre-tokenizes text into words (in the byte-level alphabet) and
// applies the merges to each word in rank order.
func (m *merger) encodeBPE(t *Tokenizer, sp *splitter, text string, out []int32) []int32 {
	for _, word := range sp.words(t.pre, text) {
		if t.ignoreMerges {
			if id, ok := t.ids[word]; ok {
				out = append(out, id)
				continue
			}
		}
		m.run(t, word, bpePrio)
		for i := m.first(); i >= 0; i = m.syms[i].next {
			sym := m.syms[i]
			piece := word[sym.start : sym.start+sym.n]
			if id, ok := t.ids[piece]; ok {
				out = append(out, id)
				continue
			}
			// As llama.cpp: fall back to the single bytes of the encoded
			// piece, dropping those that are not tokens.
			for j := 0; j < len(piece); j++ {
				if id, ok := t.ids[piece[j:j+1]]; ok {
					out = append(out, id)
				}
			}
		}
	}
	return out
}

// bigramHeap is a binary heap popping the bigram that comes before all
// others; container/heap would box every item in an interface.
type bigramHeap struct{ items []bigram }

func (h *bigramHeap) len() int { return len(h.items) }
func (h *bigramHeap) reset()   { h.items = h.items[:0] }

func (h *bigramHeap) push(x bigram) {
	h.items = append(h.items, x)
	for i := len(h.items) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.items[i].before(h.items[p]) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

func (h *bigramHeap) pop() bigram {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	for i := 0; ; {
		c := 2*i + 1
		if c >= last {
			break
		}
		if c+1 < last && h.items[c+1].before(h.items[c]) {
			c++
		}
		if !h.items[c].before(h.items[i]) {
			break
		}
		h.items[i], h.items[c] = h.items[c], h.items[i]
		i = c
	}
	return top
}
