package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Formats are the output formats NewWriter accepts, llama-bench's -o.
var Formats = []string{"md", "csv", "json", "jsonl"}

// Writer prints results as they arrive, so a long run shows its rows one by
// one, in llama-bench's layout for each format.
type Writer struct {
	w      io.Writer
	format string
	c      Config
	n      int      // results written
	cols   []column // markdown: chosen at the first result
	build  build    // markdown: for the footer
}

// NewWriter writes results of the run c to w in format (one of Formats).
func NewWriter(w io.Writer, format string, c Config) (*Writer, error) {
	if !slices.Contains(Formats, format) {
		return nil, fmt.Errorf("-o %q: want one of %s", format, strings.Join(Formats, ", "))
	}
	return &Writer{w: w, format: format, c: c}, nil
}

// Write prints one result, preceded by the header if it is the first.
func (w *Writer) Write(r Result) error {
	first := w.n == 0
	w.n++
	var b bytes.Buffer
	switch w.format {
	case "md":
		if first {
			w.cols = mdColumns(w.c, r)
			writeMDHeader(&b, w.cols)
		}
		w.build = build{commit: r.BuildCommit, time: r.BuildTime}
		b.WriteString("|")
		for _, c := range w.cols {
			fmt.Fprintf(&b, " %*s |", c.width, c.value(r))
		}
		b.WriteString("\n")
	case "csv":
		cw := csv.NewWriter(&b)
		if first {
			cw.Write(csvHeader())
		}
		cw.Write(csvRecord(r))
		cw.Flush()
	case "json":
		j, err := json.MarshalIndent(r, "  ", "  ")
		if err != nil {
			return err
		}
		if first {
			b.WriteString("[\n  ")
		} else {
			b.WriteString(",\n  ")
		}
		b.Write(j)
	case "jsonl":
		j, err := json.Marshal(r)
		if err != nil {
			return err
		}
		b.Write(j)
		b.WriteString("\n")
	}
	_, err := w.w.Write(b.Bytes())
	return err
}

// Close ends the output: the markdown footer with the build, or the json
// array's bracket. Without any result nothing was started, so nothing ends.
func (w *Writer) Close() error {
	if w.n == 0 {
		return nil
	}
	var s string
	switch w.format {
	case "md":
		s = "\nbuild: " + w.build.commit
		if w.build.time != "" {
			s += " (" + w.build.time + ")"
		}
		s += "\n"
	case "json":
		s = "\n]\n"
	}
	_, err := io.WriteString(w.w, s)
	return err
}

// column is a markdown column: its header, llama-bench's width (negative
// for left-aligned) and how a result fills it.
type column struct {
	name  string
	width int
	value func(Result) string
}

// mdColumns are llama-bench's: model, size, params, backend, ngl, then each
// parameter that varies or is not its default (threads always on the CPU,
// where they set the speed), then test and t/s.
func mdColumns(c Config, first Result) []column {
	d := Defaults()
	cols := []column{
		{"model", -30, func(r Result) string { return r.ModelType }},
		{"size", 10, func(r Result) string { return mdSize(r.ModelSize) }},
		{"params", 10, func(r Result) string { return mdParams(r.ModelParams) }},
		{"backend", -10, func(r Result) string { return r.Backend }},
		{"ngl", 3, func(r Result) string { return strconv.Itoa(r.GPULayers) }},
	}
	if first.GPULayers == 0 {
		cols = append(cols, column{"threads", 7, func(r Result) string { return strconv.Itoa(r.Threads) }})
	}
	if !slices.Equal(c.UBatch, d.UBatch) {
		cols = append(cols, column{"n_ubatch", 8, func(r Result) string { return strconv.Itoa(r.UBatch) }})
	}
	if !slices.Equal(c.FlashAttn, d.FlashAttn) {
		cols = append(cols, column{"fa", 3, func(r Result) string { return strconv.Itoa(r.FlashAttn) }})
	}
	if !slices.Equal(c.Waves, d.Waves) {
		cols = append(cols, column{"wave", 4, func(r Result) string { return strconv.Itoa(r.Wave) }})
	}
	if !slices.Equal(c.CoopMat, d.CoopMat) {
		cols = append(cols, column{"coopmat", 7, func(r Result) string { return r.CoopMat }})
	}
	return append(cols,
		column{"test", 15, func(r Result) string { return r.Test }},
		column{"t/s", 20, func(r Result) string { return fmt.Sprintf("%.2f ± %.2f", r.AvgTs, r.StddevTs) }},
	)
}

func writeMDHeader(b *bytes.Buffer, cols []column) {
	b.WriteString("|")
	for _, c := range cols {
		fmt.Fprintf(b, " %*s |", c.width, c.name)
	}
	b.WriteString("\n|")
	for _, c := range cols {
		w, align := c.width, ":"
		if w < 0 {
			w, align = -w, "-"
		}
		fmt.Fprintf(b, " %s%s |", strings.Repeat("-", w-1), align)
	}
	b.WriteString("\n")
}

func mdSize(n uint64) string {
	if n < 1<<30 {
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

func mdParams(n uint64) string {
	if n < 1e9 {
		return fmt.Sprintf("%.2f M", float64(n)/1e6)
	}
	return fmt.Sprintf("%.2f B", float64(n)/1e9)
}

// csvHeader is Result's json field names, so csv and json carry the same
// fields under the same names.
func csvHeader() []string {
	t := reflect.TypeFor[Result]()
	names := make([]string, t.NumField())
	for i := range names {
		names[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	return names
}

// csvRecord is r's fields in csvHeader's order; the per-repetition samples
// are joined with ";".
func csvRecord(r Result) []string {
	v := reflect.ValueOf(r)
	out := make([]string, v.NumField())
	for i := range out {
		f := v.Field(i)
		if f.Kind() != reflect.Slice {
			out[i] = csvValue(f)
			continue
		}
		parts := make([]string, f.Len())
		for j := range parts {
			parts[j] = csvValue(f.Index(j))
		}
		out[i] = strings.Join(parts, ";")
	}
	return out
}

func csvValue(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Int:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'f', -1, 64)
	}
	return v.String()
}
