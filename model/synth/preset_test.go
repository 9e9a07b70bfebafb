package synth

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/quant"
)

// typesOf returns name → type for preset p in mix ftype, and the names in order.
func typesOf(t *testing.T, p *preset, ftype string) (map[string]quant.Type, []string) {
	t.Helper()
	f, err := lookupFtype(ftype)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]quant.Type{}
	var names []string
	for _, ts := range p.tensors() {
		if _, dup := types[ts.name]; dup {
			t.Fatalf("%s: duplicate tensor %s", p.name, ts.name)
		}
		types[ts.name] = f.typeOf(ts, p.nLayer, p.tied)
		names = append(names, ts.name)
	}
	return types, names
}

// The geometry of the real checkpoints, written out by hand from their
// config.json files rather than derived from the table under test.
func TestPresetShapes(t *testing.T) {
	type shapes map[string][]uint64
	cases := []struct {
		preset  string
		tensors int // real files: Llama-3-8B and Llama-2-7B have 291, Qwen2.5-0.5B 290
		want    shapes
		absent  []string
	}{
		{"tiny", 39, shapes{
			"token_embd.weight":        {256, 1024},
			"blk.0.attn_norm.weight":   {256},
			"blk.0.attn_q.weight":      {256, 256},
			"blk.3.attn_k.weight":      {256, 128},
			"blk.3.attn_v.weight":      {256, 128},
			"blk.1.attn_output.weight": {256, 256},
			"blk.2.ffn_norm.weight":    {256},
			"blk.2.ffn_gate.weight":    {256, 768},
			"blk.2.ffn_up.weight":      {256, 768},
			"blk.2.ffn_down.weight":    {768, 256},
			"output_norm.weight":       {256},
			"output.weight":            {256, 1024},
		}, []string{"blk.4.attn_q.weight", "blk.0.attn_q.bias"}},
		{"llama3-8b", 291, shapes{
			"token_embd.weight":         {4096, 128256},
			"blk.0.attn_q.weight":       {4096, 4096},
			"blk.0.attn_k.weight":       {4096, 1024},
			"blk.31.attn_v.weight":      {4096, 1024},
			"blk.31.attn_output.weight": {4096, 4096},
			"blk.7.ffn_gate.weight":     {4096, 14336},
			"blk.7.ffn_down.weight":     {14336, 4096},
			"output.weight":             {4096, 128256},
		}, []string{"blk.32.attn_q.weight", "blk.0.attn_q.bias"}},
		{"llama2-7b", 291, shapes{
			"token_embd.weight":     {4096, 32000},
			"blk.0.attn_k.weight":   {4096, 4096},
			"blk.0.attn_v.weight":   {4096, 4096},
			"blk.9.ffn_up.weight":   {4096, 11008},
			"blk.9.ffn_down.weight": {11008, 4096},
			"output.weight":         {4096, 32000},
		}, nil},
		{"qwen2.5-0.5b", 290, shapes{
			"token_embd.weight":         {896, 151936},
			"blk.0.attn_q.weight":       {896, 896},
			"blk.0.attn_q.bias":         {896},
			"blk.0.attn_k.weight":       {896, 128},
			"blk.0.attn_k.bias":         {128},
			"blk.23.attn_v.bias":        {128},
			"blk.23.attn_output.weight": {896, 896},
			"blk.23.ffn_gate.weight":    {896, 4864},
			"blk.23.ffn_down.weight":    {4864, 896},
			"output_norm.weight":        {896},
		}, []string{"output.weight", "blk.24.attn_q.weight", "blk.0.attn_output.bias"}},
		{"tiny-qwen2", 1 + 2*12 + 1, shapes{
			"token_embd.weight":     {384, 1024},
			"blk.1.attn_q.bias":     {384},
			"blk.1.attn_v.weight":   {384, 128},
			"blk.1.ffn_down.weight": {1024, 384},
		}, []string{"output.weight"}},
		// Real files: Qwen3-0.6B has 310 tensors, Qwen3-8B 399, Gemma 3
		// 1B 340, Gemma 3 4B 444 (its text model), Phi-3-mini 195,
		// Llama 3.2 1B 147.
		{"qwen3-0.6b", 310, shapes{
			"token_embd.weight":         {1024, 151936},
			"blk.0.attn_q.weight":       {1024, 2048},
			"blk.0.attn_k.weight":       {1024, 1024},
			"blk.0.attn_v.weight":       {1024, 1024},
			"blk.0.attn_q_norm.weight":  {128},
			"blk.27.attn_k_norm.weight": {128},
			"blk.27.attn_output.weight": {2048, 1024},
			"blk.27.ffn_gate.weight":    {1024, 3072},
			"blk.27.ffn_down.weight":    {3072, 1024},
		}, []string{"output.weight", "blk.28.attn_q.weight", "blk.0.attn_q.bias"}},
		{"qwen3-8b", 399, shapes{
			"token_embd.weight":         {4096, 151936},
			"blk.0.attn_q.weight":       {4096, 4096},
			"blk.0.attn_k.weight":       {4096, 1024},
			"blk.35.attn_q_norm.weight": {128},
			"blk.35.attn_output.weight": {4096, 4096},
			"blk.35.ffn_up.weight":      {4096, 12288},
			"blk.35.ffn_down.weight":    {12288, 4096},
			"output.weight":             {4096, 151936},
		}, []string{"blk.36.attn_q.weight"}},
		{"gemma3-1b", 340, shapes{
			"token_embd.weight":                 {1152, 262144},
			"blk.0.attn_q.weight":               {1152, 1024},
			"blk.0.attn_k.weight":               {1152, 256},
			"blk.0.attn_v.weight":               {1152, 256},
			"blk.0.attn_q_norm.weight":          {256},
			"blk.0.attn_k_norm.weight":          {256},
			"blk.0.attn_output.weight":          {1024, 1152},
			"blk.25.post_attention_norm.weight": {1152},
			"blk.25.ffn_gate.weight":            {1152, 6912},
			"blk.25.ffn_down.weight":            {6912, 1152},
			"blk.25.post_ffw_norm.weight":       {1152},
		}, []string{"output.weight", "blk.26.attn_q.weight"}},
		{"gemma3-4b", 444, shapes{
			"token_embd.weight":           {2560, 262144},
			"blk.0.attn_q.weight":         {2560, 2048},
			"blk.0.attn_k.weight":         {2560, 1024},
			"blk.33.attn_output.weight":   {2048, 2560},
			"blk.33.ffn_up.weight":        {2560, 10240},
			"blk.33.post_ffw_norm.weight": {2560},
		}, []string{"output.weight", "blk.34.attn_q.weight"}},
		{"phi3-mini", 195, shapes{
			"token_embd.weight":        {3072, 32064},
			"blk.0.attn_qkv.weight":    {3072, 9216},
			"blk.0.attn_output.weight": {3072, 3072},
			"blk.31.ffn_up.weight":     {3072, 16384},
			"blk.31.ffn_down.weight":   {8192, 3072},
			"output.weight":            {3072, 32064},
		}, []string{"blk.0.attn_q.weight", "blk.0.ffn_gate.weight", "blk.32.attn_qkv.weight"}},
		{"llama3.2-1b", 147, shapes{
			"rope_freqs.weight":         {32},
			"token_embd.weight":         {2048, 128256},
			"blk.0.attn_q.weight":       {2048, 2048},
			"blk.0.attn_k.weight":       {2048, 512},
			"blk.15.attn_output.weight": {2048, 2048},
			"blk.15.ffn_gate.weight":    {2048, 8192},
			"blk.15.ffn_down.weight":    {8192, 2048},
		}, []string{"output.weight", "blk.16.attn_q.weight"}},
		{"tiny-qwen3", 1 + 4*11 + 1, shapes{
			"blk.0.attn_q.weight":      {256, 512},
			"blk.0.attn_k.weight":      {256, 256},
			"blk.3.attn_q_norm.weight": {128},
			"blk.3.attn_output.weight": {512, 256},
		}, []string{"output.weight"}},
		{"tiny-gemma3", 1 + 6*13 + 1, shapes{
			"blk.0.attn_q.weight":        {256, 1024},
			"blk.0.attn_v.weight":        {256, 256},
			"blk.5.attn_k_norm.weight":   {256},
			"blk.5.attn_output.weight":   {1024, 256},
			"blk.5.post_ffw_norm.weight": {256},
		}, []string{"output.weight", "blk.6.attn_q.weight"}},
		{"tiny-phi3", 1 + 3*6 + 2, shapes{
			"blk.0.attn_qkv.weight": {768, 2304},
			"blk.2.ffn_up.weight":   {768, 2048},
			"blk.2.ffn_down.weight": {1024, 768},
			"output.weight":         {768, 1024},
		}, []string{"blk.0.ffn_gate.weight"}},
		{"tiny-llama3.2", 1 + 1 + 4*9 + 1, shapes{
			"rope_freqs.weight":   {16},
			"blk.0.attn_k.weight": {256, 64},
		}, []string{"output.weight"}},
		{"tiny-qwen3moe", 1 + 4*12 + 2, shapes{
			"blk.0.ffn_gate_inp.weight":  {256, 16},
			"blk.0.ffn_gate_exps.weight": {256, 256, 16},
			"blk.3.ffn_down_exps.weight": {256, 256, 16},
			"output.weight":              {256, 1024},
		}, []string{"blk.0.ffn_gate.weight", "blk.0.ffn_down.weight"}},
		// Qwen3-30B-A3B: 579 tensors; the experts stacked along ne2.
		{"qwen3-30b-a3b", 579, shapes{
			"token_embd.weight":           {2048, 151936},
			"blk.0.attn_q.weight":         {2048, 4096},
			"blk.0.attn_k.weight":         {2048, 512},
			"blk.0.attn_v.weight":         {2048, 512},
			"blk.0.attn_q_norm.weight":    {128},
			"blk.47.attn_output.weight":   {4096, 2048},
			"blk.47.ffn_gate_inp.weight":  {2048, 128},
			"blk.47.ffn_gate_exps.weight": {2048, 768, 128},
			"blk.47.ffn_up_exps.weight":   {2048, 768, 128},
			"blk.47.ffn_down_exps.weight": {768, 2048, 128},
			"output.weight":               {2048, 151936},
		}, []string{"blk.48.attn_q.weight", "blk.0.ffn_up.weight", "blk.0.ffn_gate_inp_shexp.weight"}},
	}
	if got, want := len(cases), len(Presets()); got != want {
		t.Fatalf("test covers %d presets, the table has %d", got, want)
	}
	for _, c := range cases {
		p, err := lookupPreset(c.preset)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]uint64{}
		for _, ts := range p.tensors() {
			got[ts.name] = ts.shape
		}
		if len(got) != c.tensors {
			t.Errorf("%s: %d tensors, want %d", c.preset, len(got), c.tensors)
		}
		for name, want := range c.want {
			if !slices.Equal(got[name], want) {
				t.Errorf("%s: %s shape %v, want %v", c.preset, name, got[name], want)
			}
		}
		for _, name := range c.absent {
			if _, ok := got[name]; ok {
				t.Errorf("%s: unexpected tensor %s", c.preset, name)
			}
		}
	}
}

var blkName = regexp.MustCompile(`^blk\.(\d+)\.(\w+)\.(weight|bias)$`)

// Llama-3-8B in Q4_K_M, tensor by tensor, against the rule written out
// literally: the 16 layers use_more_bits picks for n = 32 are 0–3 (i < 4),
// 28–31 (i ≥ 28) and 6, 9, …, 27 ((i − 4) % 3 == 2).
func TestQ4KMLlama3Layers(t *testing.T) {
	p, _ := lookupPreset("llama3-8b")
	types, names := typesOf(t, p, "q4_k_m")
	more := []int{0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}
	for _, name := range names {
		want := quant.Q4_K
		if m := blkName.FindStringSubmatch(name); m != nil {
			layer, _ := strconv.Atoi(m[1])
			switch {
			case strings.HasSuffix(m[2], "norm"):
				want = quant.F32
			case (m[2] == "attn_v" || m[2] == "ffn_down") && slices.Contains(more, layer):
				want = quant.Q6_K
			}
		} else {
			switch name {
			case "output.weight":
				want = quant.Q6_K
			case "output_norm.weight":
				want = quant.F32
			}
		}
		if types[name] != want {
			t.Errorf("%s: %s, want %s", name, types[name], want)
		}
	}
}

// With 5 layers, n/8 = 0 and 7n/8 = 4: only layers 2 ((2 − 0) % 3 == 2) and
// 4 (the last eighth) get Q6_K attn_v and ffn_down.
func TestQ4KMFiveLayers(t *testing.T) {
	p := presets[0]
	p.nLayer = 5
	types, _ := typesOf(t, &p, "q4_k_m")
	count := map[quant.Type]int{}
	for name, typ := range types {
		count[typ]++
		if typ == quant.Q6_K && name != "output.weight" {
			if m := blkName.FindStringSubmatch(name); m == nil || (m[1] != "2" && m[1] != "4") {
				t.Errorf("%s is Q6_K", name)
			}
		}
	}
	want := map[quant.Type]int{
		quant.Q6_K: 2 + 2 + 1,   // attn_v and ffn_down of layers 2 and 4, output
		quant.Q4_K: 1 + 5*7 - 4, // token_embd and 7 matrices a layer, less the 4 above
		quant.F32:  5*2 + 1,     // attn_norm, ffn_norm, output_norm
	}
	if !maps.Equal(count, want) {
		t.Errorf("type counts %v, want %v", count, want)
	}
}

// Qwen2.5-0.5B's n_embd (896) is not a multiple of 256: in llama.cpp those
// tensors fall back to Q5_0 (from Q4_K) or Q8_0 (from Q6_K); we use Q8_0 for
// both. ffn_down (ne0 4864 = 19·256) keeps the K-quant rule, and the tied
// token_embd takes the output's rule (Q6_K, falling back to Q8_0).
func TestQ4KMQwen(t *testing.T) {
	p, _ := lookupPreset("qwen2.5-0.5b")
	types, _ := typesOf(t, p, "q4_k_m")
	want := map[string]quant.Type{
		"token_embd.weight":        quant.Q8_0,
		"blk.0.attn_q.weight":      quant.Q8_0,
		"blk.0.attn_q.bias":        quant.F32,
		"blk.0.attn_v.weight":      quant.Q8_0,
		"blk.0.ffn_down.weight":    quant.Q6_K, // 0 < 24/8
		"blk.4.ffn_down.weight":    quant.Q4_K, // (4 − 3) % 3 == 1
		"blk.5.ffn_down.weight":    quant.Q6_K, // (5 − 3) % 3 == 2
		"blk.21.ffn_down.weight":   quant.Q6_K, // 21 ≥ 7·24/8
		"blk.5.attn_output.weight": quant.Q8_0,
		"blk.5.ffn_up.weight":      quant.Q8_0,
		"output_norm.weight":       quant.F32,
	}
	for name, w := range want {
		if types[name] != w {
			t.Errorf("%s: %s, want %s", name, types[name], w)
		}
	}
}

// With tied embeddings token_embd serves as the output and takes its rule:
// Q6_K where its rows fit K-quants (in qwen2.5-0.5b they don't, and the
// fallback hides the rule, hence this variant of tiny).
func TestQ4KMTied(t *testing.T) {
	p := presets[0]
	p.tied = true
	types, _ := typesOf(t, &p, "q4_k_m")
	if got := types["token_embd.weight"]; got != quant.Q6_K {
		t.Errorf("tied token_embd.weight: %s, want Q6_K", got)
	}
	if _, ok := types["output.weight"]; ok {
		t.Error("tied model has output.weight")
	}
}

// q8_0 and f16 put every 2-D tensor, output included, in one type; the
// router stays F32 as the converter writes it.
func TestUniformMixes(t *testing.T) {
	for _, c := range []struct {
		ftype string
		want  quant.Type
	}{{"q8_0", quant.Q8_0}, {"f16", quant.F16}} {
		for _, name := range Presets() {
			p, _ := lookupPreset(name)
			f, _ := lookupFtype(c.ftype)
			for _, ts := range p.tensors() {
				want := c.want
				if len(ts.shape) == 1 || strings.HasSuffix(ts.name, "ffn_gate_inp.weight") {
					want = quant.F32
				}
				if got := f.typeOf(ts, p.nLayer, p.tied); got != want {
					t.Errorf("%s %s: %s is %s, want %s", name, c.ftype, ts.name, got, want)
				}
			}
		}
	}
}

func TestFallback(t *testing.T) {
	for _, c := range []struct {
		typ  quant.Type
		ne0  uint64
		want quant.Type
	}{
		{quant.Q4_K, 4096, quant.Q4_K},
		{quant.Q6_K, 4864, quant.Q6_K},
		{quant.Q4_K, 896, quant.Q8_0},
		{quant.Q6_K, 896, quant.Q8_0},
		{quant.Q8_0, 100, quant.F16},
		{quant.Q4_K, 100, quant.F16},
		{quant.F16, 100, quant.F16},
	} {
		if got := fallback(c.typ, c.ne0); got != c.want {
			t.Errorf("fallback(%s, %d) = %s, want %s", c.typ, c.ne0, got, c.want)
		}
	}
}

func TestLookupErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want []string
	}{
		{func() error { _, err := lookupPreset("llama4"); return err }(), append([]string{`"llama4"`}, Presets()...)},
		{func() error { _, err := lookupFtype("q5_k_m"); return err }(), []string{`"q5_k_m"`, "q4_k_m", "q8_0", "f16"}},
	} {
		if c.err == nil {
			t.Fatalf("no error, want one naming %v", c.want)
		}
		for _, w := range c.want {
			if !strings.Contains(c.err.Error(), w) {
				t.Errorf("error %q does not mention %s", c.err, w)
			}
		}
	}
	if p, err := lookupPreset("LLaMA3-8B"); err != nil || p.name != "llama3-8b" {
		t.Errorf("names are case-insensitive: got %v, %v", p, err)
	}
}

// Phi-3's fused attn_qkv takes attn_v's rule in llama.cpp (its
// category_is_attn_v comes before the ATTENTION_QKV branch that would make
// it Q5_K): Q6_K in the layers use_more_bits picks, Q4_K elsewhere. The
// fused ffn_up is an ordinary matrix.
func TestQ4KMPhi3(t *testing.T) {
	p, _ := lookupPreset("phi3-mini")
	types, _ := typesOf(t, p, "q4_k_m")
	more := []int{0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}
	for i := range 32 {
		want := quant.Q4_K
		if slices.Contains(more, i) {
			want = quant.Q6_K
		}
		for _, name := range []string{"attn_qkv", "ffn_down"} {
			if got := types[fmt.Sprintf("blk.%d.%s.weight", i, name)]; got != want {
				t.Errorf("blk.%d.%s: %s, want %s", i, name, got, want)
			}
		}
		for _, name := range []string{"attn_output", "ffn_up"} {
			if got := types[fmt.Sprintf("blk.%d.%s.weight", i, name)]; got != quant.Q4_K {
				t.Errorf("blk.%d.%s: %s, want Q4_K", i, name, got)
			}
		}
	}
	if types["token_embd.weight"] != quant.Q4_K || types["output.weight"] != quant.Q6_K {
		t.Errorf("token_embd %s, output %s; want Q4_K and Q6_K", types["token_embd.weight"], types["output.weight"])
	}
}

// The new tensors of Qwen3, Gemma 3 and Llama 3.2 in Q4_K_M: norms and
// rope_freqs stay F32; tied embeddings take the output's Q6_K, or Q8_0
// where the rows (Gemma 3 1B's 1152) do not fit K-quants, as in llama.cpp;
// Gemma 3 1B's other 1152-wide matrices fall back to Q8_0 (llama.cpp's
// Q5_0, which we lack).
func TestQ4KMNewLayouts(t *testing.T) {
	for preset, want := range map[string]map[string]quant.Type{
		"qwen3-0.6b": {
			"token_embd.weight":         quant.Q6_K,
			"blk.0.attn_q_norm.weight":  quant.F32,
			"blk.0.attn_k_norm.weight":  quant.F32,
			"blk.0.attn_v.weight":       quant.Q6_K, // 0 < 28/8
			"blk.4.attn_v.weight":       quant.Q4_K, // (4 − 3) % 3 == 1
			"blk.5.ffn_down.weight":     quant.Q6_K, // (5 − 3) % 3 == 2
			"blk.27.attn_output.weight": quant.Q4_K,
		},
		"qwen3-8b": {"token_embd.weight": quant.Q4_K, "output.weight": quant.Q6_K, "blk.35.attn_k_norm.weight": quant.F32},
		"gemma3-1b": {
			"token_embd.weight":                quant.Q8_0,
			"blk.0.attn_q.weight":              quant.Q8_0,
			"blk.0.attn_v.weight":              quant.Q8_0, // Q6_K, falling back
			"blk.4.attn_v.weight":              quant.Q8_0, // Q4_K, falling back
			"blk.0.attn_output.weight":         quant.Q4_K, // ne0 1024
			"blk.0.ffn_down.weight":            quant.Q6_K, // ne0 6912 = 27·256
			"blk.4.ffn_down.weight":            quant.Q4_K, // (4 − 3) % 3 == 1
			"blk.0.post_attention_norm.weight": quant.F32,
			"blk.0.post_ffw_norm.weight":       quant.F32,
		},
		"gemma3-4b":   {"token_embd.weight": quant.Q6_K, "blk.0.attn_q.weight": quant.Q4_K, "blk.0.attn_v.weight": quant.Q6_K},
		"llama3.2-1b": {"rope_freqs.weight": quant.F32, "token_embd.weight": quant.Q6_K, "blk.1.attn_v.weight": quant.Q6_K},
	} {
		p, _ := lookupPreset(preset)
		types, _ := typesOf(t, p, "q4_k_m")
		for name, w := range want {
			if types[name] != w {
				t.Errorf("%s: %s is %s, want %s", preset, name, types[name], w)
			}
		}
	}
}

// Qwen3-30B-A3B in Q4_K_M, tensor by tensor, against llama_tensor_get_type
// for 128 experts written out: the 48 layers use_more_bits picks are 0–5
// (i < 6), 42–47 (i ≥ 42) and 8, 11, …, 41 ((i − 6) % 3 == 2); there attn_v
// and the stacked ffn_down_exps (a "ffn_down" by name, its layer parsed
// from it) are Q6_K. ffn_gate_exps and ffn_up_exps are plain matrices
// (Q4_K), the router F32 (never quantized), the output Q6_K and the untied
// token_embd Q4_K.
func TestQ4KMQwen3MoE(t *testing.T) {
	p, _ := lookupPreset("qwen3-30b-a3b")
	types, names := typesOf(t, p, "q4_k_m")
	more := []int{0, 1, 2, 3, 4, 5, 42, 43, 44, 45, 46, 47}
	for i := 8; i <= 41; i += 3 {
		more = append(more, i)
	}
	count := map[quant.Type]int{}
	for _, name := range names {
		want := quant.Q4_K
		if m := blkName.FindStringSubmatch(name); m != nil {
			layer, _ := strconv.Atoi(m[1])
			switch {
			case strings.HasSuffix(m[2], "norm") || m[2] == "ffn_gate_inp":
				want = quant.F32
			case (m[2] == "attn_v" || m[2] == "ffn_down_exps") && slices.Contains(more, layer):
				want = quant.Q6_K
			}
		} else if name == "output.weight" {
			want = quant.Q6_K
		} else if name == "output_norm.weight" {
			want = quant.F32
		}
		if types[name] != want {
			t.Errorf("%s: %s, want %s", name, types[name], want)
		}
		count[types[name]]++
	}
	if len(more) != 24 || count[quant.Q6_K] != 2*24+1 {
		t.Errorf("%d layers with more bits, %d Q6_K tensors; want 24 and 49", len(more), count[quant.Q6_K])
	}
}

// rope_freqs for Llama 3.2 1B (base 500000, head dim 64, factor 32, low 1,
// high 4, original context 8192): 1 for the first 15 frequencies, 32 for
// the last 14, and between them the three smoothed values, computed
// independently (Python, the converter's formula in float64).
func TestLlama3RopeFactors(t *testing.T) {
	p, _ := lookupPreset("llama3.2-1b")
	got := p.llama3Rope.factors(float64(p.ropeBase), int(p.headDim))
	if len(got) != 32 {
		t.Fatalf("%d factors, want 32", len(got))
	}
	for i, v := range got {
		want := map[int]float64{15: 1.651329, 16: 3.292262, 17: 9.666729}[i]
		switch {
		case i < 15:
			want = 1
		case i > 17:
			want = 32
		}
		if math.Abs(float64(v)-want) > 1e-6*want {
			t.Errorf("factor %d = %.7g, want %.7g", i, v, want)
		}
	}
}
