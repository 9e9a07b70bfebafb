#!/usr/bin/env bash
# Prints docs/AMD.md's table: every pipeline vkinfer builds for Llama-3-8B
# (synth:llama3-8b, Q4_K_M shapes), compiled by AMD's compiler (ACO, in
# Mesa's RADV) on RADV's null devices for one chip of each generation, GCN4
# to RDNA4, with its registers, LDS, spills and occupancy. No AMD GPU is
# needed: RADV_FORCE_FAMILY makes RADV create a device for the family that
# compiles but runs nothing.
#
#   scripts/amd_matrix.sh [infer kernels flags]   e.g. --int-dot on
#
# Needs Mesa's RADV (mesa-vulkan-drivers, 25.x from bookworm-backports).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
icd=/usr/share/vulkan/icd.d/radeon_icd.json
[ -f "$icd" ] || { echo "amd_matrix: $icd not found: install mesa-vulkan-drivers" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$tmp/xdg}"
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"

(cd "$root" && go build -o "$tmp/infer" ./cmd/infer)
args=()
for g in "GCN4 polaris10" "GCN5 vega10" "RDNA1 navi10" "RDNA2 navi21" "RDNA3 navi31" "RDNA4 gfx1200"; do
  family=${g#* }
  # A private cache directory: every pipeline compiled afresh, no tuning
  # profile.
  XDG_CACHE_HOME="$tmp/cache-$family" VK_DRIVER_FILES="$icd" VK_ICD_FILENAMES="$icd" RADV_FORCE_FAMILY="$family" \
    "$tmp/infer" kernels -m synth:llama3-8b -o json "$@" >"$tmp/$family.json" 2>"$tmp/$family.log" ||
    { cat "$tmp/$family.log" >&2; exit 1; }
  args+=("$g=$tmp/$family.json")
done
(cd "$root" && go run ./scripts/amdtable "${args[@]}")
