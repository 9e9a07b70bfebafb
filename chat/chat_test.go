package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/internal/fixtures"
	"github.com/vkinfer/vkinfer/model/tokenizer"
)

// goldenCase is one entry of a templates/*.golden.json file: llama.cpp's
// rendering of a conversation (see the folder's README).
type goldenCase struct {
	Case     string    `json:"case"`
	Messages []Message `json:"messages"`
	AddGen   bool      `json:"add_generation_prompt"`
	Prompt   string    `json:"prompt"`
}

// goldenTokens are the BOS and EOS texts llama.cpp passed to each template
// (the folder's README).
var goldenTokens = map[string][2]string{
	"meta-llama-Llama-3.1-8B-Instruct":         {"<|begin_of_text|>", "<|eot_id|>"},
	"meta-llama-Llama-3.2-3B-Instruct":         {"<|begin_of_text|>", "<|eot_id|>"},
	"Qwen-Qwen2.5-7B-Instruct":                 {"", "<|im_end|>"},
	"Qwen-Qwen3-0.6B":                          {"", "<|im_end|>"},
	"HuggingFaceTB-SmolLM3-3B":                 {"", "<|im_end|>"},
	"chatml-default":                           {"", "<|im_end|>"},
	"google-gemma-2-2b-it":                     {"<bos>", "<eos>"},
	"microsoft-Phi-3.5-mini-instruct":          {"<s>", "<|endoftext|>"},
	"mistralai-Mistral-Nemo-Instruct-2407":     {"<s>", "</s>"},
	"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"},
}

// goldenDate is the date the golden renderings were given (date_string).
var goldenDate = time.Date(2026, time.January, 1, 12, 0, 0, 0, time.UTC)

// TestGoldenTemplates renders every conversation of every golden file in
// the shared templates folder and compares the text with llama.cpp's, byte
// for byte. chatml-default has no .jinja: it is what ChatML must give.
func TestGoldenTemplates(t *testing.T) {
	dir := fixtures.Path(t, "templates")
	files, err := filepath.Glob(filepath.Join(dir, "*.golden.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files in %s (%v)", dir, err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".golden.json")
		t.Run(name, func(t *testing.T) {
			toks, ok := goldenTokens[name]
			if !ok {
				t.Fatalf("no BOS/EOS known for %s: add it from the folder's README", name)
			}
			tmpl := ChatML()
			if name != "chatml-default" {
				src, err := os.ReadFile(filepath.Join(dir, name+".jinja"))
				if err != nil {
					t.Fatal(err)
				}
				if tmpl, err = Parse(string(src)); err != nil {
					t.Fatal(err)
				}
			}
			tmpl.Now = func() time.Time { return goldenDate }
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var cases []goldenCase
			if err := json.Unmarshal(b, &cases); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(cases) == 0 {
				t.Fatalf("%s holds no cases", f)
			}
			for _, c := range cases {
				got, err := tmpl.Render(c.Messages, c.AddGen, toks[0], toks[1])
				if err != nil {
					t.Errorf("%s: %v", c.Case, err)
					continue
				}
				if got != c.Prompt {
					t.Errorf("%s: rendered\n%q\nllama.cpp:\n%q", c.Case, got, c.Prompt)
				}
			}
		})
	}
}

// TestSystemMerge: a template that refuses system messages (Gemma 2's
// raises) gets the system text joined to the first user message, as
// llama.cpp does; one that writes system messages keeps them apart.
func TestSystemMerge(t *testing.T) {
	refuse, err := Parse(`{% if messages[0].role == 'system' %}{{ raise_exception('no system') }}{% endif %}` +
		`{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{"system", "S"}, {"user", "U"}}
	if got, err := refuse.Render(msgs, false, "", ""); err != nil || got != "[user:S\nU]" {
		t.Errorf("refusing template: %q, %v; want the system text merged into the user's", got, err)
	}
	if got, err := refuse.Render(msgs[:1], false, "", ""); err != nil || got != "" {
		t.Errorf("refusing template, system message alone: %q, %v; want it dropped", got, err)
	}
	if got, err := ChatML().Render([]Message{{"developer", "D"}, {"user", "U"}}, true, "", ""); err != nil ||
		got != "<|im_start|>system\nD<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n" {
		t.Errorf("ChatML with a developer message: %q, %v", got, err)
	}
}

// TestGlobals checks what the package adds to the library: strftime_now on
// the template's clock (literal text left alone), the format filter, and a
// raised exception surfacing as an error.
func TestGlobals(t *testing.T) {
	for _, c := range []struct{ src, want, err string }{
		{`{{ strftime_now("%d %b %Y") }}`, "05 Mar 2026", ""},
		{`{{ strftime_now("Jan %Y-%m-%d %H:%M:%S %A %a %B %j %I%p %y %%") }}`, "Jan 2026-03-05 14:07:09 Thursday Thu March 064 02PM 26 %", ""},
		{`{{ date_string }}|{{ datetime }}`, "05 Mar 2026|Mar 05 2026", ""},
		{`{{ "%s has %d, %.2f, %s%%"|format("x", 3, 2.5, true) }}`, "x has 3, 2.50, True%", ""},
		{`{{ "%s"|format(2.0) }}`, "2.0", ""},
		{`{{ "%s %s"|format("x") }}`, "", "more arguments"},
		{`{{ "%q"|format("x") }}`, "", "not supported"},
		{`{{ strftime_now("%Q") }}`, "", "not supported"},
		{`{{ raise_exception("bad role") }}`, "", "bad role"},
	} {
		tmpl, err := Parse(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		tmpl.Now = func() time.Time { return time.Date(2026, time.March, 5, 14, 7, 9, 0, time.UTC) }
		got, err := tmpl.Render(nil, false, "", "")
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%s: %q, %v; want %q", c.src, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %q, %v; want an error with %q", c.src, got, err, c.err)
		}
	}
	if _, err := Parse("{% if %}"); err == nil {
		t.Error("a template that does not parse gave no error")
	}
}

// TestFromModel: the GGUF's template, ChatML with fallback where it has
// none, the override file over either, and clear errors.
func TestFromModel(t *testing.T) {
	file := func(kvs ...gguf.KV) *gguf.File {
		f, err := gguf.Header("test.gguf", append([]gguf.KV{{Key: "general.architecture", Value: "llama"}}, kvs...), nil)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	msgs := []Message{{"user", "hi"}}
	render := func(tmpl *Template) string {
		s, err := tmpl.Render(msgs, true, "", "")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	own := file(gguf.KV{Key: "tokenizer.chat_template", Value: "{% for m in messages %}<{{ m.content }}>{% endfor %}"})
	tmpl, fallback, err := FromModel(own, "")
	if err != nil || fallback || render(tmpl) != "<hi>" {
		t.Errorf("the GGUF's template: fallback %v, err %v", fallback, err)
	}
	tmpl, fallback, err = FromModel(file(), "")
	if err != nil || !fallback || render(tmpl) != render(ChatML()) {
		t.Errorf("no template: fallback %v, err %v; want ChatML", fallback, err)
	}
	path := filepath.Join(t.TempDir(), "t.jinja")
	if err := os.WriteFile(path, []byte("{{ messages[0].content }}!"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*gguf.File{own, file()} {
		tmpl, fallback, err = FromModel(f, path)
		if err != nil || fallback || render(tmpl) != "hi!" {
			t.Errorf("override: fallback %v, err %v", fallback, err)
		}
	}
	if _, _, err := FromModel(own, filepath.Join(t.TempDir(), "missing.jinja")); err == nil || !strings.Contains(err.Error(), "chat template file") {
		t.Errorf("a missing override file: %v", err)
	}
	if _, _, err := FromModel(file(gguf.KV{Key: "tokenizer.chat_template", Value: "{% for %}"}), ""); err == nil ||
		!strings.Contains(err.Error(), "tokenizer.chat_template") {
		t.Errorf("a GGUF template that does not parse: %v", err)
	}
}

// TestTokenize: the special-token texts a template writes become single
// special tokens, and BOS appears once whether or not the template wrote it.
func TestTokenize(t *testing.T) {
	load := func(name string) *tokenizer.Tokenizer {
		f, err := gguf.Open(fixtures.Path(t, "arch", name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		tok, err := tokenizer.FromGGUF(f)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	qwen := load("tiny-qwen3.gguf")
	qbos, qeos := SpecialTexts(qwen)
	prompt, err := ChatML().Render([]Message{{"user", "hi"}}, true, qbos, qeos)
	if err != nil {
		t.Fatal(err)
	}
	ids := Tokenize(qwen, prompt)
	var specials []string
	for _, id := range ids {
		if p := qwen.Piece(id); strings.HasPrefix(p, "<|") {
			specials = append(specials, p)
		}
	}
	if want := []string{"<|im_start|>", "<|im_end|>", "<|im_start|>"}; !slices.Equal(specials, want) {
		t.Errorf("%q tokenizes to %v: special tokens %q, want %q", prompt, ids, specials, want)
	}
	if plain := qwen.Encode(prompt, true, false); len(plain) <= len(ids) {
		t.Errorf("without special parsing %q is %d tokens, with it %d: the specials were not single tokens", prompt, len(plain), len(ids))
	}

	// tiny-llama31 adds SentencePiece's BOS, <s>.
	llama := load("tiny-llama31.gguf")
	bos, _ := SpecialTexts(llama)
	if !llama.AddBOS() || bos == "" {
		t.Fatalf("tiny-llama31: BOS %q, added %v; the test wants a model that adds one", bos, llama.AddBOS())
	}
	want := Tokenize(llama, "hi there")
	if got := Tokenize(llama, bos+"hi there"); !slices.Equal(got, want) || want[0] != llama.BOS() || slices.Contains(want[1:], llama.BOS()) {
		t.Errorf("with and without the template's BOS: %v and %v; want one BOS, first", got, want)
	}
}
