package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// The request bodies of /v1/chat/completions and /v1/completions, in
// OpenAI's shapes with llama-server's extra sampling fields. Pointers tell
// a field left out (the server's default) from one set to its zero value.
// Keys the server does not know are ignored, as OpenAI-compatible servers
// do: front ends send fields of their own (user, metadata, …).
type request struct {
	Model               string          `json:"model"`
	Messages            []message       `json:"messages"` // chat
	Prompt              json.RawMessage `json:"prompt"`   // completions: a string, or an array of token ids
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"` // chat's newer name for max_tokens
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	MinP                *float64        `json:"min_p"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"` // a string or an array of strings
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	PresencePenalty  *float64 `json:"presence_penalty"`
	FrequencyPenalty *float64 `json:"frequency_penalty"`
	RepeatPenalty    *float64 `json:"repeat_penalty"`
	IgnoreEOS        bool     `json:"ignore_eos"` // llama-server's: generate past end-of-generation tokens
	N                *int     `json:"n"`
	Logprobs         any      `json:"logprobs"`     // chat: a bool, completions: a count
	TopLogprobs      *int     `json:"top_logprobs"` // chat: alternatives per token
	Tools            []any    `json:"tools"`
}

// message is one chat message. Content is a string or, as the SDKs send it,
// an array of parts of which only text parts are supported.
type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// maxBody bounds a request body: a prompt can be long, but not unbounded.
const maxBody = 8 << 20

// maxStops is OpenAI's limit on stop sequences.
const maxStops = 4

// decodeRequest reads one JSON object from r: malformed JSON, a body that
// is not one object, or a field of the wrong type is an invalid request.
func decodeRequest(r io.Reader) (*request, error) {
	body, err := io.ReadAll(io.LimitReader(r, maxBody+1))
	if err != nil {
		return nil, invalid("reading the request body: %v", err)
	}
	if len(body) > maxBody {
		return nil, invalid("the request body exceeds %d bytes", maxBody)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var req request
	if err := dec.Decode(&req); err != nil {
		return nil, invalid("malformed JSON: %v", jsonError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, invalid("malformed JSON: more than one value in the body")
	}
	return &req, nil
}

// jsonError turns encoding/json's errors into a message that names the
// field, where there is one.
func jsonError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("field %q: want %s, got a JSON %s", te.Field, te.Type, te.Value)
	}
	return err.Error()
}

// params are a validated request: what the scheduler and the response
// writers need.
type params struct {
	maxTokens    int // < 0: until end of generation or a full context
	temp         *float64
	topP         *float64
	topK         *int
	minP         *float64
	seed         *int64
	presence     *float64
	frequency    *float64
	repeat       *float64
	stop         []string
	stream       bool
	includeUsage bool
	ignoreEOS    bool
	logprobs     bool // the response reports each token's log-probability
	topLogprobs  int  // and this many alternatives
}

// validate checks the fields chat and completions share; chat says which
// of the two the request is, where their fields differ.
func (req *request) validate(chat bool) (params, error) {
	p := params{maxTokens: -1, temp: req.Temperature, topP: req.TopP, topK: req.TopK, minP: req.MinP, seed: req.Seed,
		presence: req.PresencePenalty, frequency: req.FrequencyPenalty, repeat: req.RepeatPenalty, stream: req.Stream,
		ignoreEOS: req.IgnoreEOS}
	mt := req.MaxTokens
	if req.MaxCompletionTokens != nil {
		mt = req.MaxCompletionTokens
	}
	if mt != nil {
		if *mt < 1 {
			return p, invalid("max_tokens %d: want at least 1", *mt)
		}
		p.maxTokens = *mt
	}
	for _, f := range []struct {
		name   string
		v      *float64
		lo, hi float64
	}{
		{"temperature", req.Temperature, 0, 2},
		{"top_p", req.TopP, 0, 1},
		{"min_p", req.MinP, 0, 1},
		{"presence_penalty", req.PresencePenalty, -2, 2},
		{"frequency_penalty", req.FrequencyPenalty, -2, 2},
		{"repeat_penalty", req.RepeatPenalty, 0, math.MaxFloat32},
	} {
		if f.v != nil && !(*f.v >= f.lo && *f.v <= f.hi) {
			return p, invalid("%s %v: want a number from %v to %v", f.name, *f.v, f.lo, f.hi)
		}
	}
	if req.TopK != nil && *req.TopK < 0 {
		return p, invalid("top_k %d: want 0 (off) or more", *req.TopK)
	}
	if req.N != nil && *req.N != 1 {
		return p, invalid("n %d: only one choice per request is supported", *req.N)
	}
	if err := req.logprobs(chat, &p); err != nil {
		return p, err
	}
	if len(req.Tools) > 0 {
		return p, invalid("tools are not supported")
	}
	if req.StreamOptions != nil {
		if !req.Stream {
			return p, invalid("stream_options: only allowed when stream is true")
		}
		p.includeUsage = req.StreamOptions.IncludeUsage
	}
	stop, err := parseStop(req.Stop)
	if err != nil {
		return p, err
	}
	p.stop = stop
	return p, nil
}

// logprobs reads the log-probability fields: chat's logprobs (a bool) and
// top_logprobs, completions' logprobs (the number of alternatives). false
// or null is off on both.
func (req *request) logprobs(chat bool, p *params) error {
	top := func(name string, n float64) error {
		if n != math.Trunc(n) || n < 0 || n > maxTopLogprobs {
			return invalid("%s %v: want a whole number from 0 to %d", name, n, maxTopLogprobs)
		}
		p.topLogprobs = int(n)
		return nil
	}
	switch v := req.Logprobs.(type) {
	case nil:
	case bool:
		if v && !chat {
			return invalid("logprobs true: completions take the number of alternatives (0 to %d)", maxTopLogprobs)
		}
		p.logprobs = v
	case float64:
		if chat {
			return invalid("logprobs %v: chat takes true or false, and top_logprobs for alternatives", v)
		}
		p.logprobs = true
		if err := top("logprobs", v); err != nil {
			return err
		}
	default:
		return invalid("logprobs: want a boolean (chat) or a number (completions)")
	}
	if req.TopLogprobs != nil {
		switch {
		case !chat:
			return invalid("top_logprobs: a chat field; completions take logprobs N")
		case !p.logprobs:
			return invalid("top_logprobs: only allowed when logprobs is true")
		}
		return top("top_logprobs", float64(*req.TopLogprobs))
	}
	return nil
}

// parseStop reads stop: absent, null, a string, or an array of up to
// maxStops non-empty strings.
func parseStop(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, invalid("stop: an empty string")
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalid("stop: want a string or an array of strings")
	}
	if len(list) > maxStops {
		return nil, invalid("stop: %d sequences, at most %d", len(list), maxStops)
	}
	for _, s := range list {
		if s == "" {
			return nil, invalid("stop: an empty string")
		}
	}
	return list, nil
}

// prompt reads a completion's prompt: a string, or an array of token ids
// (as llama-server takes them). Several prompts in one request are not
// supported.
func (req *request) prompt() (text string, ids []int32, err error) {
	raw := req.Prompt
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, invalid("prompt: missing")
	}
	if json.Unmarshal(raw, &text) == nil {
		return text, nil, nil
	}
	var nums []int64
	if json.Unmarshal(raw, &nums) == nil {
		ids = make([]int32, len(nums))
		for i, n := range nums {
			if n < 0 || n > math.MaxInt32 {
				return "", nil, invalid("prompt: token id %d out of range", n)
			}
			ids[i] = int32(n)
		}
		return "", ids, nil
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		if len(list) == 1 {
			return list[0], nil, nil
		}
		return "", nil, invalid("prompt: %d prompts in one request; send one", len(list))
	}
	return "", nil, invalid("prompt: want a string or an array of token ids")
}

// roles are the message roles chat templates know.
var roles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

// messages checks and flattens the chat messages.
func (req *request) messages() ([]Message, error) {
	if len(req.Messages) == 0 {
		return nil, invalid("messages: want at least one message")
	}
	out := make([]Message, len(req.Messages))
	for i, m := range req.Messages {
		if !roles[m.Role] {
			return nil, invalid("messages[%d].role %q: want system, developer, user, assistant or tool", i, m.Role)
		}
		text, err := content(m.Content)
		if err != nil {
			return nil, invalid("messages[%d].content: %v", i, err)
		}
		out[i] = Message{Role: m.Role, Content: text}
	}
	return out, nil
}

// content reads a message's content: a string, null (an assistant message
// that only called tools), or an array of text parts, joined.
func content(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("want a string or an array of content parts")
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", fmt.Errorf("part %d has type %q: only text parts are supported", j, p.Type)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}
