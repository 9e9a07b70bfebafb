package tokenizer

import "unicode/utf8"

// Decoder turns a stream of token ids back into text. Tokens may end inside
// a UTF-8 sequence (byte-fallback and byte-level tokens often do), so it
// holds bytes back until their character is complete and never returns half
// a character; invalid bytes come out as U+FFFD, so everything it returns is
// valid UTF-8.
//
// Control and unknown tokens (BOS, EOS, <|eot_id|> …) produce no text, as
// llama.cpp's detokenizer without special rendering; user-defined tokens
// produce their text. Unlike llama.cpp's whole-sequence detokenize, no
// leading space is stripped from the first SentencePiece token: a stream
// continues text, so " Once" stays " Once".
type Decoder struct {
	t       *Tokenizer
	pending []byte
}

// NewDecoder returns a Decoder for t's tokens.
func (t *Tokenizer) NewDecoder() *Decoder { return &Decoder{t: t} }

// Add appends token id and returns the text it completes (possibly "").
// Ids outside the vocabulary are ignored.
func (d *Decoder) Add(id int32) string {
	if id < 0 || int(id) >= len(d.t.attrs) || d.t.attrs[id]&(attrControl|attrUnknown) != 0 {
		return ""
	}
	d.pending = append(d.pending, d.t.pieces[id]...)
	return d.drain(false)
}

// Flush returns whatever is held back, an incomplete sequence at the end
// becoming U+FFFD (one per byte, as ranging over a Go string gives), and
// resets the Decoder.
func (d *Decoder) Flush() string { return d.drain(true) }

// drain returns the complete characters at the front of pending, keeping an
// incomplete sequence at its end unless final.
func (d *Decoder) drain(final bool) string {
	out := make([]byte, 0, len(d.pending))
	i := 0
	for i < len(d.pending) {
		rest := d.pending[i:]
		if !final && !utf8.FullRune(rest) {
			break
		}
		r, size := utf8.DecodeRune(rest)
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, rest[:size]...)
		}
		i += size
	}
	d.pending = append(d.pending[:0], d.pending[i:]...)
	return string(out)
}
