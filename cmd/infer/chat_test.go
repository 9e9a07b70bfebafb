package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vkinfer/vkinfer/internal/fixtures"
)

// chatInfer runs `infer chat` with args, stdin as its input.
func chatInfer(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	cmd := command(t, append([]string{"chat"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(t0)}
	if err != nil {
		t.Fatalf("infer chat %v: %v\n%s", args, err, r.stderr)
	}
	return r
}

// turnLine is the --verbose line of each answered turn.
var turnLine = regexp.MustCompile(`chat: prompt (\d+) tokens, (\d+) reused from the cache, (\d+) prefilled`)

// turnStats are the prompt, reused and prefilled counts of each turn.
func turnStats(t *testing.T, stderr string) [][3]int {
	t.Helper()
	var turns [][3]int
	for _, m := range turnLine.FindAllStringSubmatch(stderr, -1) {
		var s [3]int
		for i := range s {
			s[i], _ = strconv.Atoi(m[i+1])
		}
		if s[0] != s[1]+s[2] {
			t.Errorf("turn %d: %d tokens are not %d reused plus %d prefilled", len(turns)+1, s[0], s[1], s[2])
		}
		turns = append(turns, s)
	}
	return turns
}

// TestChat is a scripted conversation with tiny-qwen3 (no chat template in
// the file: ChatML) on the CPU backend and on Vulkan (lavapipe): the second
// turn prefills only what the first did not leave in the cache, /clear
// starts from nothing, and every turn prints its timings.
func TestChat(t *testing.T) {
	model := fixtures.Path(t, "arch", "tiny-qwen3.gguf")
	for _, backend := range []string{"cpu", "vulkan"} {
		t.Run(backend, func(t *testing.T) {
			r := chatInfer(t, "hello there\nhow are you\n/clear\nagain\n/exit\nnever read\n",
				"-m", model, "--backend", backend, "--temp", "0", "-n", "8", "--ignore-eos", "--verbose")
			if !strings.Contains(r.stderr, "using ChatML") {
				t.Errorf("stderr does not say the model has no template:\n%s", r.stderr)
			}
			turns := turnStats(t, r.stderr)
			if len(turns) != 3 {
				t.Fatalf("%d answered turns, want 3:\n%s", len(turns), r.stderr)
			}
			if turns[0][1] != 0 {
				t.Errorf("turn 1 reused %d tokens of an empty cache", turns[0][1])
			}
			// Turn 2 reuses turn 1's prompt and its 8 answer tokens but
			// the last, sampled and never evaluated.
			if turns[1][1] != turns[0][0]+7 {
				t.Errorf("turn 2 reused %d tokens; want turn 1's prompt, %d, and 7 of its answer", turns[1][1], turns[0][0])
			}
			if turns[2][1] != 0 || !strings.Contains(r.stderr, "chat: new conversation") {
				t.Errorf("after /clear: %v, want nothing reused", turns[2])
			}
			if n := strings.Count(r.stderr, "prompt eval time"); n != 3 || strings.Count(r.stderr, "eval time") != 6 {
				t.Errorf("%d prompt timing lines, want one per turn:\n%s", n, r.stderr)
			}
			if n := strings.Count(r.stdout, "> "); n < 5 {
				t.Errorf("stdout has %d prompts, want 5 (three turns, /clear, /exit):\n%q", n, r.stdout)
			}
		})
	}
}

// TestChatOverflow: a message that would overflow the context is refused
// with a hint at /clear; the conversation goes on as it was (the next short
// message still reuses the cache), /clear makes room, and chat exits 0.
func TestChatOverflow(t *testing.T) {
	// About 90 tokens in tiny-qwen3's vocabulary of letters: it fits a
	// context of 128 alone, not after the first turn.
	long := strings.Repeat("many words ", 13)
	r := chatInfer(t, "hi\n"+long+"\nok\n/clear\n"+long+"\n",
		"-m", fixtures.Path(t, "arch", "tiny-qwen3.gguf"), "--backend", "cpu", "-c", "128", "--temp", "0", "-n", "4", "--ignore-eos", "--verbose")
	if n := strings.Count(r.stderr, "/clear starts a new one"); n != 1 {
		t.Fatalf("%d overflow messages, want 1:\n%s", n, r.stderr)
	}
	turns := turnStats(t, r.stderr)
	if len(turns) != 3 {
		t.Fatalf("%d answered turns, want 3 (hi, ok, the long one after /clear):\n%s", len(turns), r.stderr)
	}
	if turns[1][1] != turns[0][0]+3 {
		t.Errorf("after the refused message, turn 2 reused %d tokens; want turn 1's prompt, %d, and 3 of its answer", turns[1][1], turns[0][0])
	}
	if turns[2][1] != 0 {
		t.Errorf("the long message after /clear reused %d tokens", turns[2][1])
	}
}

// TestChatTemplateFile: --chat-template-file replaces the model's template
// (here one that raises, which is said and the turn dropped); a missing
// file is an error.
func TestChatTemplateFile(t *testing.T) {
	model := fixtures.Path(t, "arch", "tiny-qwen3.gguf")
	path := filepath.Join(t.TempDir(), "t.jinja")
	if err := os.WriteFile(path, []byte(`{{ raise_exception("this template takes no messages") }}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := chatInfer(t, "hi\n", "-m", model, "--backend", "cpu", "--chat-template-file", path)
	if !strings.Contains(r.stderr, "this template takes no messages") || strings.Contains(r.stderr, "using ChatML") {
		t.Errorf("stderr:\n%s", r.stderr)
	}
	bad := infer(t, "chat", "-m", model, "--backend", "cpu", "--chat-template-file", path+".missing")
	if bad.code != 1 || !strings.Contains(lastLine(bad.stderr), "chat template file") {
		t.Errorf("a missing template file: exit %d, %q", bad.code, lastLine(bad.stderr))
	}
}

// syncBuffer is a bytes.Buffer a test polls while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestChatInterrupt: Ctrl-C during an endless answer stops the answer, not
// the program; the partial answer stays in the conversation (the next turn
// reuses its tokens); end of input then quits with status 0.
func TestChatInterrupt(t *testing.T) {
	cmd := command(t, "chat", "-m", fixtures.Path(t, "arch", "tiny-qwen3.gguf"), "--backend", "cpu", "-t", "1",
		"-c", "4096", "--temp", "0", "--ignore-eos", "--verbose")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// await waits until ok holds.
	await := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(60 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("no %s after a minute:\n%s", what, errb.String())
			}
		}
	}
	for turn := 1; turn <= 2; turn++ {
		mark := len(out.String())
		if _, err := io.WriteString(stdin, "tell me a story\n"); err != nil {
			t.Fatal(err)
		}
		await("answer", func() bool { return len(out.String()) > mark+20 })
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		await("interruption", func() bool { return strings.Count(errb.String(), "chat: answer interrupted") == turn })
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, errb.String())
	}
	turns := turnStats(t, errb.String())
	if len(turns) != 2 {
		t.Fatalf("%d answered turns, want 2:\n%s", len(turns), errb.String())
	}
	if turns[1][1] <= turns[0][0] {
		t.Errorf("turn 2 reused %d tokens, turn 1's prompt alone was %d: the interrupted answer was not kept", turns[1][1], turns[0][0])
	}
}
