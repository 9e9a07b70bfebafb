// Command amdtable prints docs/AMD.md's table from `infer kernels -o json`
// outputs, one per AMD generation: a row per pipeline (kind and op), a
// column per generation with its VGPRs, SGPRs, subgroup size and
// subgroups per SIMD, and the LDS and spills of all of them.
//
//	go run ./scripts/amdtable "GCN4 polaris10=polaris10.json" "RDNA3 navi31=navi31.json" …
//
// scripts/amd_matrix.sh runs the whole matrix.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// pipeline is what the table reads of an `infer kernels -o json` entry.
type pipeline struct {
	Kind     string             `json:"kind"`
	Op       string             `json:"op"`
	Lanes    int                `json:"workgroup_size"`
	Subgroup int                `json:"subgroup_size"`
	Stats    map[string]float64 `json:"stats"`
	Error    string             `json:"error"`
}

type column struct {
	label string
	byRow map[string]pipeline // by row key
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, w io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: amdtable LABEL=FILE.json … (the JSON of infer kernels -o json)")
	}
	var cols []column
	var rows []string // "kind\top", each once
	for _, a := range args {
		label, path, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("%q: want LABEL=FILE.json", a)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var ps []pipeline
		if err := json.Unmarshal(b, &ps); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		c := column{label: label, byRow: map[string]pipeline{}}
		for _, p := range ps {
			key := p.Kind + "\t" + p.Op
			if !slices.Contains(rows, key) {
				rows = append(rows, key)
			}
			c.byRow[key] = p
		}
		cols = append(cols, c)
	}
	// Decode first; within a kind by op, which groups each kernel's
	// shapes and waves.
	slices.SortStableFunc(rows, func(a, b string) int {
		ka, _, _ := strings.Cut(a, "\t")
		kb, _, _ := strings.Cut(b, "\t")
		if ka != kb {
			return strings.Compare(kindOrder(ka), kindOrder(kb))
		}
		return strings.Compare(a, b)
	})
	var out strings.Builder
	out.WriteString("| kind | pipeline | lanes | LDS (bytes) | spills |")
	for _, c := range cols {
		out.WriteString(" " + c.label + " |")
	}
	out.WriteString("\n|---|---|--:|--:|--:|" + strings.Repeat("--:|", len(cols)) + "\n")
	for _, key := range rows {
		kind, op, _ := strings.Cut(key, "\t")
		var lanes, lds, spills []string
		var cells []string
		for _, c := range cols {
			p, ok := c.byRow[key]
			switch {
			case !ok:
				cells = append(cells, "")
				continue
			case p.Error != "":
				cells = append(cells, "build failed")
				continue
			}
			lanes = addOnce(lanes, fmt.Sprint(p.Lanes))
			lds = addOnce(lds, fmt.Sprint(p.Stats["LDS size"]))
			spills = addOnce(spills, fmt.Sprint(p.Stats["Spilled VGPRs"]+p.Stats["Spilled SGPRs"]+p.Stats["Scratch size"]))
			cells = append(cells, fmt.Sprintf("%v/%v w%d → %v", p.Stats["VGPRs"], p.Stats["SGPRs"], p.Subgroup, p.Stats["Subgroups per SIMD"]))
		}
		fmt.Fprintf(&out, "| %s | %s | %s | %s | %s | %s |\n", kind, op,
			strings.Join(lanes, ", "), strings.Join(lds, ", "), strings.Join(spills, ", "), strings.Join(cells, " | "))
	}
	_, err := io.WriteString(w, out.String())
	return err
}

func kindOrder(kind string) string {
	if kind == "decode" {
		return "0"
	}
	return "1"
}

// addOnce appends s unless the list holds it already.
func addOnce(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}
