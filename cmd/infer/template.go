package main

import (
	"fmt"
	"io"

	"github.com/vkinfer/vkinfer/chat"
	"github.com/vkinfer/vkinfer/gguf"
	"github.com/vkinfer/vkinfer/model"
)

// promptTemplate is the chat template infer chat and infer serve render
// conversations with, and the model's BOS and EOS texts the template is
// given (as llama.cpp passes them).
type promptTemplate struct {
	tmpl     *chat.Template
	bos, eos string
}

// loadTemplate returns the template for m: --chat-template-file's when
// file is not "", else the GGUF's, else ChatML with a line on log that
// says so (prefixed by the command's name, cmd).
func loadTemplate(cmd string, log io.Writer, f *gguf.File, m *model.Model, file string) (promptTemplate, error) {
	tmpl, fallback, err := chat.FromModel(f, file)
	if err != nil {
		return promptTemplate{}, err
	}
	if fallback {
		fmt.Fprintf(log, "%s: the model has no chat template (tokenizer.chat_template); using ChatML, as llama.cpp does\n", cmd)
	}
	t := promptTemplate{tmpl: tmpl}
	t.bos, t.eos = chat.SpecialTexts(m.Tok)
	return t, nil
}

// render renders a conversation with the generation prompt after it.
func (t promptTemplate) render(msgs []chat.Message) (string, error) {
	return t.tmpl.Render(msgs, true, t.bos, t.eos)
}
