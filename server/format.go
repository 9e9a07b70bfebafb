package server

import (
	"encoding/json"
	"net/http"
	"time"
)

func now() int64 { return time.Now().Unix() }

// format is one endpoint's response shapes: chat completions carry
// messages and deltas, text completions plain text.
type format struct {
	idPrefix string
	object   string // of the whole response
	chunk    string // of a streamed chunk
	chat     bool
}

var (
	chatFormat = format{idPrefix: "chatcmpl-", object: "chat.completion", chunk: "chat.completion.chunk", chat: true}
	textFormat = format{idPrefix: "cmpl-", object: "text_completion", chunk: "text_completion"}
)

// response is what both endpoints answer, whole or as a chunk.
type response struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *usage   `json:"usage,omitempty"`
	f       format
}

type choice struct {
	Index        int     `json:"index"`
	Message      *delta  `json:"message,omitempty"` // chat, whole
	Delta        *delta  `json:"delta,omitempty"`   // chat, streamed
	Text         *string `json:"text,omitempty"`    // completions
	Logprobs     any     `json:"logprobs"`          // null unless asked for
	FinishReason *string `json:"finish_reason"`
}

type delta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

func (f format) newResponse(id, modelName string) response {
	return response{ID: id, Created: now(), Model: modelName, f: f}
}

// whole is the non-streamed response.
func (r response) whole(text, reason string, u usage, logprobs any) response {
	r.Object = r.f.object
	c := choice{FinishReason: &reason, Logprobs: logprobs}
	if r.f.chat {
		c.Message = &delta{Role: "assistant", Content: &text}
	} else {
		c.Text = &text
	}
	r.Choices, r.Usage = []choice{c}, &u
	return r
}

// chunk is a streamed piece of text, with the log-probabilities of the
// tokens sampled since the last chunk when asked for; with a finish reason,
// the last one.
func (r response) chunk(text string, role bool, reason *string, logprobs any) response {
	r.Object = r.f.chunk
	c := choice{FinishReason: reason, Logprobs: logprobs}
	if r.f.chat {
		d := &delta{}
		if role {
			d.Role = "assistant"
		}
		if text != "" || role {
			d.Content = &text
		}
		c.Delta = d
	} else {
		c.Text = &text
	}
	r.Choices = []choice{c}
	return r
}

// usageChunk is the chunk stream_options.include_usage asks for after the
// last: no choices, the usage.
func (r response) usageChunk(u usage) response {
	r.Object = r.f.chunk
	r.Choices, r.Usage = []choice{}, &u
	return r
}

// stream writes a request's output as server-sent events: a first chunk
// (the role, for chat), one per piece of text, one with the finish
// reason, the usage when asked for, then [DONE]. A failure after the
// headers are out is an error event; nothing follows it.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, out *stream, p params, resp response) error {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	// The headers go out now: a client sees its request accepted even
	// while it waits in the queue.
	if rc.Flush() != nil {
		return nil
	}
	send := func(v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			b, _ = json.Marshal(internal(err).body())
		}
		if _, err := w.Write(append(append([]byte("data: "), b...), '\n', '\n')); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if resp.f.chat && !send(resp.chunk("", true, nil, nil)) {
		return nil
	}
	for {
		part, err := out.next(r.Context())
		if err != nil {
			return nil // the client has gone; the scheduler frees its slot
		}
		if (part.text != "" || len(part.logprobs) > 0) &&
			!send(resp.chunk(part.text, false, nil, logprobsJSON(resp.f, s.cfg.Model.Piece, part.logprobs, p.logprobs))) {
			return nil
		}
		if !part.done {
			continue
		}
		if part.err != nil {
			send(internal(part.err).body())
			return nil
		}
		if !send(resp.chunk("", false, &part.reason, nil)) {
			return nil
		}
		if p.includeUsage && !send(resp.usageChunk(part.usage)) {
			return nil
		}
		w.Write([]byte("data: [DONE]\n\n"))
		rc.Flush()
		return nil
	}
}
