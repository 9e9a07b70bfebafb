// Package buildinfo says which commit a binary was built from, for
// `infer --version` and the benchmark results' metadata.
package buildinfo

import "runtime/debug"

// Info is the commit a binary was built from (8 hex digits, "-dirty" when
// its tree had changes, "unknown" without version-control stamps) and
// that commit's time ("" when unknown).
type Info struct{ Commit, Time string }

// Read returns the running binary's Info.
func Read() Info {
	b := Info{Commit: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value[:min(8, len(s.Value))]
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.Commit != "unknown" {
		b.Commit += "-dirty"
	}
	return b
}
