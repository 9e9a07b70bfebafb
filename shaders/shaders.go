// Package shaders embeds the compiled compute shaders: shaders/glsl/NAME.comp
// becomes shaders/spirv/NAME.spv through scripts/compile_spirv.sh.
package shaders

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

//go:embed spirv/*.spv
var spirv embed.FS

// SPIRV returns the SPIR-V of the named shader (its file name without
// extension). An unknown name is a programming error and panics.
func SPIRV(name string) []byte {
	b, err := spirv.ReadFile("spirv/" + name + ".spv")
	if err != nil {
		panic("shaders: no shader " + name + " (is shaders/glsl/" + name + ".comp compiled? run scripts/compile_spirv.sh)")
	}
	return b
}

// Names lists every embedded shader, sorted.
func Names() []string {
	entries, err := fs.ReadDir(spirv, "spirv")
	if err != nil {
		panic("shaders: reading the embedded directory: " + err.Error()) // cannot happen: go:embed guarantees it
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".spv"))
	}
	sort.Strings(names)
	return names
}
