package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The BPE pre-tokenizers split text into words with a regular expression
// before merging. Go's regexp has neither the lookahead (?!\S) these
// expressions use nor the same Unicode classes, so each is written out by
// hand, following llama.cpp's unicode.cpp: its hand-written GPT-2 and
// Llama 3 splitters are mirrored step by step, and the expressions it runs
// through std::regex (Qwen2's, the "default" chain) are implemented with
// the semantics std::regex gives them there.

// Character classes, from the Unicode tables as llama.cpp's
// unicode_cpt_flags: letter \p{L}, number \p{N}, space \s (the White_Space
// property), and defined for every character inside the segment (llama.cpp
// gives positions past the end flags 0, which several tests rely on).
const (
	fLetter uint8 = 1 << iota
	fNumber
	fSpace
	fDefined
)

func classify(r rune) uint8 {
	f := fDefined
	switch {
	case unicode.IsLetter(r):
		f |= fLetter
	case unicode.IsNumber(r):
		f |= fNumber
	}
	if unicode.Is(unicode.White_Space, r) {
		f |= fSpace
	}
	return f
}

var asciiClass = func() (c [128]uint8) {
	for r := range c {
		c[r] = classify(rune(r))
	}
	return c
}()

func classOf(r rune) uint8 {
	if r < 128 {
		return asciiClass[r]
	}
	return classify(r)
}

// stage is one split expression applied to one segment of characters with
// their classes; it appends the lengths of the pieces it cuts the segment
// into, which cover it exactly. Lookarounds see only the segment, as in
// llama.cpp, where each expression runs on the pieces of the previous one.
type stage func(c []rune, f []uint8, out []int) []int

// preTokenizer is a BPE pre-tokenizer with the vocabulary flags llama.cpp
// ties to it.
type preTokenizer struct {
	stages       []stage
	ignoreMerges bool
	addBOS       bool
}

var (
	// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
	gpt2Stages = []stage{splitGPT2}
	// Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	llama3Stages = []stage{splitLlama3(3)}
	// Qwen2: the Llama 3 expression with \p{N} instead of \p{N}{1,3}.
	qwen2Stages = []stage{splitLlama3(1)}
	// llama.cpp's default for BPE models without a known pre-tokenizer:
	// [\p{P}\$\+<=>\^~\|]+, then GPT-2's, then \p{N}+, then [0-9][0-9][0-9].
	defaultStages = []stage{splitRuns(isDefaultPunct), splitGPT2, splitRuns(isNumberClass), splitDigitTriples}
)

// preTokenizers maps tokenizer.ggml.pre to the pre-tokenizer, for the names
// llama.cpp gives these expressions. A missing name means "default".
var preTokenizers = map[string]preTokenizer{
	"":        {stages: defaultStages},
	"default": {stages: defaultStages},

	"llama3":    {stages: llama3Stages, ignoreMerges: true, addBOS: true},
	"llama-v3":  {stages: llama3Stages, ignoreMerges: true, addBOS: true},
	"llama-bpe": {stages: llama3Stages, ignoreMerges: true, addBOS: true},
	"falcon3":   {stages: llama3Stages, ignoreMerges: true, addBOS: true},
	"pixtral":   {stages: llama3Stages, ignoreMerges: true, addBOS: true},
	"dbrx":      {stages: llama3Stages},
	"smaug-bpe": {stages: llama3Stages},

	"qwen2":            {stages: qwen2Stages},
	"deepseek-r1-qwen": {stages: qwen2Stages},
	"megrez":           {stages: qwen2Stages},
	"stablelm2":        {stages: qwen2Stages},

	"gpt-2": {stages: gpt2Stages},
	"phi-2": {stages: gpt2Stages},
	"mpt":   {stages: gpt2Stages},
	"olmo":  {stages: gpt2Stages},
}

// splitter holds the buffers of one Encode call's pre-tokenization.
type splitter struct {
	cpts  []rune
	flags []uint8
	lens  []int
	next  []int
	buf   []byte
	out   []string
}

// words splits text and returns the words in GPT-2's byte-level alphabet.
// The slice is reused by the next call.
func (s *splitter) words(p preTokenizer, text string) []string {
	s.cpts = decodeLenient(text, s.cpts[:0])
	s.flags = s.flags[:0]
	for _, r := range s.cpts {
		s.flags = append(s.flags, classOf(r))
	}
	s.lens = append(s.lens[:0], len(s.cpts))
	for _, st := range p.stages {
		s.next = s.next[:0]
		pos := 0
		for _, n := range s.lens {
			s.next = st(s.cpts[pos:pos+n], s.flags[pos:pos+n], s.next)
			pos += n
		}
		s.lens, s.next = s.next, s.lens
	}
	s.out = s.out[:0]
	pos := 0
	for _, n := range s.lens {
		s.buf = s.buf[:0]
		for _, r := range s.cpts[pos : pos+n] {
			s.buf = appendCpt(s.buf, r)
		}
		pos += n
		var w strings.Builder
		w.Grow(2 * len(s.buf))
		for _, b := range s.buf {
			w.WriteString(byteEnc[b])
		}
		s.out = append(s.out, w.String())
	}
	return s.out
}

// pieces tracks the cut points of one segment: add(end) closes the piece
// that runs from the previous cut to end (empty pieces are dropped).
type pieces struct {
	out  []int
	prev int
}

func (p *pieces) add(end int) {
	if end > p.prev {
		p.out = append(p.out, end-p.prev)
	}
	p.prev = end
}

// segment gives bounds-checked access to a segment: past its end a
// character is -1 and its class 0.
type segment struct {
	c []rune
	f []uint8
}

func (s segment) cpt(i int) rune {
	if i < len(s.c) {
		return s.c[i]
	}
	return -1
}

func (s segment) class(i int) uint8 {
	if i < len(s.f) {
		return s.f[i]
	}
	return 0
}

// contraction returns how many characters after an apostrophe at c[pos]
// form one of 's 't 'm 'd 're 've 'll (0 if none); fold makes the match
// case-insensitive.
func contraction(s segment, pos int, fold bool) int {
	if pos+1 >= len(s.c) {
		return 0
	}
	low := func(r rune) rune {
		if fold {
			return unicode.ToLower(r)
		}
		return r
	}
	a := low(s.c[pos+1])
	if a == 's' || a == 't' || a == 'm' || a == 'd' {
		return 2
	}
	if pos+2 < len(s.c) {
		b := low(s.c[pos+2])
		if (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') {
			return 3
		}
	}
	return 0
}

// splitGPT2 mirrors llama.cpp's unicode_regex_split_custom_gpt2.
func splitGPT2(c []rune, f []uint8, out []int) []int {
	s := segment{c, f}
	p := pieces{out: out}
	n := len(c)
	for pos := 0; pos < n; {
		r := c[pos]
		// 's|'t|'re|'ve|'m|'ll|'d
		if r == '\'' {
			if k := contraction(s, pos, false); k > 0 {
				pos += k
				p.add(pos)
				continue
			}
		}
		f2 := f[pos]
		if r == ' ' {
			f2 = s.class(pos + 1)
		}
		// ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
		var in func(uint8) bool
		switch {
		case f2&fLetter != 0:
			in = func(x uint8) bool { return x&fLetter != 0 }
		case f2&fNumber != 0:
			in = func(x uint8) bool { return x&fNumber != 0 }
		case f2&(fSpace|fLetter|fNumber) == 0 && f2 != 0:
			in = func(x uint8) bool { return x&(fSpace|fLetter|fNumber) == 0 && x != 0 }
		}
		if in != nil {
			if r == ' ' {
				pos++
			}
			for in(s.class(pos)) {
				pos++
			}
			p.add(pos)
			continue
		}
		pos = splitSpaces(s, pos, false)
		p.add(pos)
	}
	return p.out
}

// splitSpaces handles the whitespace alternatives at c[pos] and returns
// where the piece ends: with newlines, \s*[\r\n]+ (through the last \r or \n
// of the run); then \s+(?!\S) (all of the run but its last character when
// more text follows); then \s+. A position no alternative matches yields a
// one-character piece, as llama.cpp's "no match" step, so the caller always
// advances.
func splitSpaces(s segment, pos int, newlines bool) int {
	nws, lastNL := 0, 0
	for s.class(pos+nws)&fSpace != 0 {
		if r := s.c[pos+nws]; r == '\r' || r == '\n' {
			lastNL = pos + nws + 1
		}
		nws++
	}
	switch {
	case newlines && lastNL > 0:
		return lastNL
	case nws > 1 && pos+nws < len(s.c):
		return pos + nws - 1
	case nws > 0:
		return pos + nws
	}
	return pos + 1
}

// splitLlama3 mirrors llama.cpp's unicode_regex_split_custom_llama3 with
// numbers cut into groups of at most maxDigits. With maxDigits 1 it is
// Qwen2's expression, which llama.cpp runs through std::regex on its
// "collapsed" text; on that text the expression classifies every character
// as the hand-written splitter does (\s there is ASCII whitespace plus every
// non-ASCII White_Space character), so the two agree.
func splitLlama3(maxDigits int) stage {
	return func(c []rune, f []uint8, out []int) []int {
		s := segment{c, f}
		p := pieces{out: out}
		n := len(c)
		for pos := 0; pos < n; {
			r, fr := c[pos], f[pos]
			// (?i:'s|'t|'re|'ve|'m|'ll|'d)
			if r == '\'' {
				if k := contraction(s, pos, true); k > 0 {
					pos += k
					p.add(pos)
					continue
				}
			}
			// [^\r\n\p{L}\p{N}]?\p{L}+
			if r != '\r' && r != '\n' && fr&fNumber == 0 && (fr&fLetter != 0 || s.class(pos+1)&fLetter != 0) {
				pos++
				for s.class(pos)&fLetter != 0 {
					pos++
				}
				p.add(pos)
				continue
			}
			// \p{N}{1,maxDigits}
			if fr&fNumber != 0 {
				ini := pos
				for s.class(pos)&fNumber != 0 {
					pos++
					if pos-ini >= maxDigits {
						p.add(pos)
						ini = pos
					}
				}
				p.add(pos)
				continue
			}
			// ' ?[^\s\p{L}\p{N}]+[\r\n]*'. Unlike the GPT-2 splitter,
			// llama.cpp tests the current character's flags here, so a space
			// ending the segment forms a piece of its own.
			f2 := fr
			if r == ' ' {
				f2 = s.class(pos + 1)
			}
			if f2&(fSpace|fLetter|fNumber) == 0 {
				if r == ' ' {
					pos++
				}
				for x := s.class(pos); x&(fSpace|fLetter|fNumber) == 0 && x != 0; x = s.class(pos) {
					pos++
				}
				for r := s.cpt(pos); r == '\r' || r == '\n'; r = s.cpt(pos) {
					pos++
				}
				p.add(pos)
				continue
			}
			pos = splitSpaces(s, pos, true)
			p.add(pos)
		}
		return p.out
	}
}

// splitRuns cuts a segment into maximal runs of characters in and out of a
// class, which is what splitting with the expression [class]+ gives (the
// matches and the gaps between them).
func splitRuns(in func(r rune, f uint8) bool) stage {
	return func(c []rune, f []uint8, out []int) []int {
		p := pieces{out: out}
		for i := 1; i < len(c); i++ {
			if in(c[i], f[i]) != in(c[i-1], f[i-1]) {
				p.add(i)
			}
		}
		p.add(len(c))
		return p.out
	}
}

// isDefaultPunct is [\p{P}\$\+<=>\^~\|] as llama.cpp evaluates it: ASCII
// characters by their category, others by their collapsed class, which for
// punctuation is the Unicode category too.
func isDefaultPunct(r rune, _ uint8) bool {
	return unicode.IsPunct(r) || strings.ContainsRune("$+<=>^~|", r)
}

// isNumberClass is \p{N}.
func isNumberClass(_ rune, f uint8) bool { return f&fNumber != 0 }

// splitDigitTriples cuts out every run of three ASCII digits, scanning from
// the left as [0-9][0-9][0-9] does, leaving the text between as pieces.
func splitDigitTriples(c []rune, _ []uint8, out []int) []int {
	p := pieces{out: out}
	digit := func(r rune) bool { return '0' <= r && r <= '9' }
	for i := 0; i+3 <= len(c); {
		if digit(c[i]) && digit(c[i+1]) && digit(c[i+2]) {
			p.add(i)
			p.add(i + 3)
			i += 3
			continue
		}
		i++
	}
	p.add(len(c))
	return p.out
}

// decodeLenient decodes UTF-8 as llama.cpp's unicode_cpts_from_utf8: the
// lead byte is trusted for the length (overlong forms and surrogates are
// accepted), and a byte that starts no complete sequence becomes U+FFFD.
// llama.cpp throws on sequences above U+10FFFF; they become U+FFFD here.
func decodeLenient(s string, dst []rune) []rune {
	cont := func(i int) bool { return i < len(s) && s[i]&0xC0 == 0x80 }
	for i := 0; i < len(s); {
		b := s[i]
		switch {
		case b < 0x80:
			dst = append(dst, rune(b))
			i++
			continue
		case b&0xE0 == 0xC0:
			if cont(i + 1) {
				dst = append(dst, rune(b&0x1F)<<6|rune(s[i+1]&0x3F))
				i += 2
				continue
			}
		case b&0xF0 == 0xE0:
			if cont(i+1) && cont(i+2) {
				dst = append(dst, rune(b&0x0F)<<12|rune(s[i+1]&0x3F)<<6|rune(s[i+2]&0x3F))
				i += 3
				continue
			}
		case b&0xF8 == 0xF0:
			if cont(i+1) && cont(i+2) && cont(i+3) {
				r := rune(b&0x07)<<18 | rune(s[i+1]&0x3F)<<12 | rune(s[i+2]&0x3F)<<6 | rune(s[i+3]&0x3F)
				if r <= unicode.MaxRune {
					dst = append(dst, r)
					i += 4
					continue
				}
			}
		}
		dst = append(dst, utf8.RuneError)
		i++
	}
	return dst
}

// appendCpt encodes r as llama.cpp's unicode_cpt_to_utf8, which (unlike
// utf8.AppendRune) keeps surrogates as their three-byte form.
func appendCpt(b []byte, r rune) []byte {
	switch {
	case r < 0x80:
		return append(b, byte(r))
	case r < 0x800:
		return append(b, 0xC0|byte(r>>6), 0x80|byte(r)&0x3F)
	case r < 0x10000:
		return append(b, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
	}
	return append(b, 0xF0|byte(r>>18), 0x80|byte(r>>12)&0x3F, 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
}

// GPT-2's byte-level alphabet: every byte is written as a printable
// character, itself for the printable Latin-1 bytes and U+0100 onwards for
// the rest, in byte order.
var (
	byteEnc [256]string
	byteDec = map[rune]byte{}
)

// ByteToken is the token text byte-level BPE vocabularies hold for byte b
// (GPT-2's bytes_to_unicode).
func ByteToken(b byte) string { return byteEnc[b] }

func init() {
	next := rune(256)
	for b := range 256 {
		r := rune(b)
		if !(0x21 <= b && b <= 0x7E || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF) {
			r = next
			next++
		}
		byteEnc[b] = string(r)
		byteDec[r] = byte(b)
	}
}

// byteDecode undoes the byte-level alphabet of a token's text. A character
// outside the alphabet (llama.cpp renders it as "[UNK_BYTE_…]") and a
// malformed byte are kept as they are.
func byteDecode(text string) string {
	out := make([]byte, 0, len(text))
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		if b, ok := byteDec[r]; ok {
			out = append(out, b)
		} else {
			out = append(out, text[i:i+size]...)
		}
		i += size
	}
	return string(out)
}
