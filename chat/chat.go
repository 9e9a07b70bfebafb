// Package chat turns a conversation into the prompt text a model was
// trained on, by rendering the Jinja chat template its GGUF carries
// (tokenizer.chat_template) as llama.cpp renders it.
package chat

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/model/tokenizer"
)

// Message is one turn of a conversation. Role is "system", "user" or
// "assistant" ("developer" is read as "system", as llama.cpp does).
type Message struct {
	Role, Content string
}

// Template is a parsed chat template. It is safe for concurrent use once
// parsed, as long as Now is not changed.
type Template struct {
	src string
	t   *jinja.Template
	// noSystem: the template ignores or refuses a system message (Gemma's
	// raises an exception). llama.cpp then merges the system text into the
	// next message, and so do we.
	noSystem bool
	// mapDeveloper: "developer" messages become "system" ones; llama.cpp
	// does it for every template but GPT-OSS's, which has a developer role.
	mapDeveloper bool
	// Now is the clock behind date_string, datetime and strftime_now();
	// nil means time.Now. Tests fix it to render reproducibly.
	Now func() time.Time
}

// chatMLSource is llama.cpp's fallback template for a model without one
// (CHATML_TEMPLATE_SRC in common/chat.cpp), to the byte.
const chatMLSource = "{%- for message in messages -%}\n" +
	"  {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}\n" +
	"{%- endfor -%}\n" +
	"{%- if add_generation_prompt -%}\n" +
	"  {{- '<|im_start|>assistant\\n' -}}\n" +
	"{%- endif -%}"

// ChatML returns the ChatML template llama.cpp uses when a GGUF has none.
func ChatML() *Template {
	t, err := Parse(chatMLSource)
	if err != nil {
		panic(fmt.Sprintf("chat: the built-in ChatML template does not parse: %v", err))
	}
	return t
}

// probeSystem is the system text of the capability probe: a template that
// supports system messages writes it somewhere in its output.
const probeSystem = "vkinfer system probe 7f3a"

// Parse compiles a Jinja chat template and probes it, as llama.cpp does,
// for whether it renders a system message.
func Parse(src string) (*Template, error) {
	jt, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	t := &Template{src: src, t: jt, mapDeveloper: !strings.Contains(src, "<|channel|>")}
	out, err := t.render([]Message{{"system", probeSystem}, {"user", "hi"}}, false, "", "")
	t.noSystem = err != nil || !strings.Contains(out, probeSystem)
	return t, nil
}

// Source returns the template's Jinja text.
func (t *Template) Source() string { return t.src }

// Render renders msgs; addGen appends the assistant generation prompt. bos
// and eos are the model's special-token texts (SpecialTexts), passed to the
// template as bos_token and eos_token. The text is what the template
// writes, BOS included where it writes one: tokenize it with Tokenize.
func (t *Template) Render(msgs []Message, addGen bool, bos, eos string) (string, error) {
	msgs = t.normalize(msgs)
	out, err := t.render(msgs, addGen, bos, eos)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}

// normalize applies llama.cpp's workarounds before rendering: developer
// messages become system ones, and where the template has no system role
// the first message's system text joins the next message (or is dropped
// when nothing follows).
func (t *Template) normalize(msgs []Message) []Message {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		if t.mapDeveloper && m.Role == "developer" {
			m.Role = "system"
		}
		out[i] = m
	}
	if t.noSystem && len(out) > 0 && out[0].Role == "system" {
		if len(out) > 1 {
			out[1].Content = out[0].Content + "\n" + out[1].Content
		}
		out = out[1:]
	}
	return out
}

// render runs the template with the context llama.cpp gives it
// (common_chat_template_direct_apply and common_chat_extra_context):
// messages, bos_token, eos_token, enable_thinking (on), date_string and
// datetime, add_generation_prompt only when set.
func (t *Template) render(msgs []Message, addGen bool, bos, eos string) (string, error) {
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(m.Role))
		d.AsDict().Set("content", jinja.NewString(m.Content))
		list[i] = d
	}
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	n := now()
	data := map[string]jinja.Value{
		"messages":        jinja.NewList(list),
		"bos_token":       jinja.NewString(bos),
		"eos_token":       jinja.NewString(eos),
		"enable_thinking": jinja.NewBool(true),
		"date_string":     jinja.NewString(n.Format("02 Jan 2006")),
		"datetime":        jinja.NewString(n.Format("Jan 02 2006")),
		"strftime_now":    strftimeNow(n),
		"format":          jinja.NewCallable("format", format),
	}
	if addGen {
		data["add_generation_prompt"] = jinja.NewBool(true)
	}
	return t.t.RenderValues(data)
}

// FromModel returns the chat template to use for f: the text of the file
// override when it is not "" (--chat-template-file), else the GGUF's
// tokenizer.chat_template, else ChatML with fallback set (the caller says
// so to the user). f may be nil when override is given.
func FromModel(f *gguf.File, override string) (t *Template, fallback bool, err error) {
	if override != "" {
		b, err := os.ReadFile(override)
		if err != nil {
			return nil, false, fmt.Errorf("chat template file: %w", err)
		}
		t, err := Parse(string(b))
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", override, err)
		}
		return t, false, nil
	}
	if f == nil {
		return nil, false, fmt.Errorf("chat template: no model file and no template file")
	}
	src, ok := f.String("tokenizer.chat_template")
	if !ok || src == "" || src == "chatml" {
		return ChatML(), true, nil
	}
	t, err = Parse(src)
	if err != nil {
		return nil, false, fmt.Errorf("%s: tokenizer.chat_template: %w", f.Path(), err)
	}
	return t, false, nil
}

// SpecialTexts returns the texts of tok's BOS and EOS tokens for Render
// ("" where the vocabulary has none), as llama.cpp passes them.
func SpecialTexts(tok *tokenizer.Tokenizer) (bos, eos string) {
	if id := tok.BOS(); id >= 0 {
		bos = tok.Piece(id)
	}
	if id := tok.EOS(); id >= 0 {
		eos = tok.Piece(id)
	}
	return bos, eos
}

// Tokenize turns a rendered prompt into token ids: special-token texts
// (<|im_start|>, <|eot_id|> …) become their tokens, and BOS is added where
// the tokenizer adds one unless the template already wrote it (llama.cpp
// strips the template's BOS instead; the tokens are the same).
func Tokenize(tok *tokenizer.Tokenizer, prompt string) []int32 {
	bos, _ := SpecialTexts(tok)
	addBOS := !(bos != "" && tok.AddBOS() && strings.HasPrefix(prompt, bos))
	return tok.Encode(prompt, addBOS, true)
}
