package server

import "strings"

// Decoder turns token ids into text, holding back incomplete UTF-8
// sequences (tokenizer.Decoder).
type Decoder interface {
	Add(id int32) string
	Flush() string
}

// textStream turns a request's tokens into the text it may send: it cuts
// the text at the first stop string and holds back any tail that could
// still become one, so that a stop string never reaches the client, not
// even in part.
type textStream struct {
	dec  Decoder
	stop []string
	buf  string // decoded, not yet released
}

func newTextStream(dec Decoder, stop []string) *textStream {
	return &textStream{dec: dec, stop: stop}
}

// add decodes id and returns the text now safe to send, and whether a stop
// string was found (the text before it is what is returned).
func (t *textStream) add(id int32) (string, bool) {
	t.buf += t.dec.Add(id)
	if i := t.firstStop(); i >= 0 {
		out := t.buf[:i]
		t.buf = ""
		return out, true
	}
	hold := 0
	for _, s := range t.stop {
		hold = max(hold, partialStop(t.buf, s))
	}
	out := t.buf[:len(t.buf)-hold]
	t.buf = t.buf[len(t.buf)-hold:]
	return out, false
}

// flush releases what is held back when generation ends for another
// reason: the decoder's last bytes and any partial stop string.
func (t *textStream) flush() string {
	t.buf += t.dec.Flush()
	if i := t.firstStop(); i >= 0 {
		t.buf = t.buf[:i]
	}
	out := t.buf
	t.buf = ""
	return out
}

// firstStop is where the earliest stop string in buf starts, or -1. The
// text released before buf never holds the start of one: add holds such
// tails back.
func (t *textStream) firstStop() int {
	at := -1
	for _, s := range t.stop {
		if i := strings.Index(t.buf, s); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	return at
}

// partialStop is the length of the longest tail of text that is a proper
// prefix of stop.
func partialStop(text, stop string) int {
	for n := min(len(text), len(stop)-1); n > 0; n-- {
		if strings.HasSuffix(text, stop[:n]) {
			return n
		}
	}
	return 0
}
