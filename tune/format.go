package tune

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Formats are the output formats Write accepts.
var Formats = []string{"md", "json"}

// Write prints r as markdown tables (one per kernel and shape, like a
// paper's) or as JSON.
func (r *Report) Write(w io.Writer, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "md":
		return r.writeMarkdown(w)
	}
	return fmt.Errorf("-o %q: want one of %s", format, strings.Join(Formats, ", "))
}

func (r *Report) writeMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Device: %s (%s). Shapes: %s. Timer: %s, median of %d runs after a warm-up.\n",
		r.Device, r.Driver, r.Model, r.Timer, r.Reps)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\nNote: %s.\n", n)
	}
	for _, t := range r.Tables {
		fmt.Fprintf(&b, "\n### %s: %s (weight %d)\n\n", t.Kernel, t.Shape, t.Weight)
		fmt.Fprintf(&b, "| variant | ms | %s | vs ref | max err (bound) | note |\n", t.Unit)
		b.WriteString("|---|---:|---:|---:|---:|---|\n")
		for _, c := range t.Cells {
			name := c.Variant
			switch {
			case c.Ref && c.Default:
				name += " (ref, default)"
			case c.Ref:
				name += " (ref)"
			case c.Default:
				name += " (default)"
			}
			ms, rate, vs, note := "—", "—", "—", ""
			if c.OK() {
				ms, rate = fmt.Sprintf("%.4f", c.Millis), fmt.Sprintf("%.1f", c.Rate)
				if !c.Ref {
					vs = fmt.Sprintf("%+.0f%%", 100*c.VsRef)
				}
			}
			switch {
			case c.Winner:
				note = "**winner**"
			case c.Status == StatusParity:
				note = "FAILED parity"
			case c.Fallback:
				note = "not run: " + c.Status + "; the engine runs the default here, whose time the choice counts"
			case !c.OK():
				note = "not run: " + c.Status
			}
			errs := "—"
			if c.OK() || c.Status == StatusParity {
				errs = fmt.Sprintf("%.2g (%.2g)", c.MaxErr, c.Bound)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", name, ms, rate, vs, errs, note)
		}
	}
	fmt.Fprintf(&b, "\nChosen (least time weighted by each shape's count, among variants that passed everywhere): %s\n", r.Profile)
	if len(r.Unchosen) > 0 {
		fmt.Fprintf(&b, "No variant passed on every shape for %s: built-in defaults kept.\n", strings.Join(r.Unchosen, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
