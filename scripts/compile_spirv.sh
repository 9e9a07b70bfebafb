#!/usr/bin/env bash
# Compiles every shaders/glsl/*.comp into shaders/spirv/NAME.spv, the SPIR-V
# that package shaders embeds and the repository commits.
#
#   scripts/compile_spirv.sh           rebuild shaders/spirv (and drop .spv files
#                                      whose .comp is gone)
#   scripts/compile_spirv.sh --check   rebuild into a temporary directory and fail,
#                                      listing them, if any committed .spv is stale,
#                                      missing or extra (CI runs this)
#
# Shared code lives in shaders/glsl/*.glsl and is reached with #include.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/shaders/glsl"
out="$root/shaders/spirv"

mode=build
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# scripts/glslc pins the compiler (and fetches it on first use): the
# committed SPIR-V must be what one compiler version makes of the sources.
glslc="$root/scripts/glslc"
"$glslc" --version >/dev/null

dest="$out"
if [ "$mode" = check ]; then
  dest="$(mktemp -d)"
  trap 'rm -rf "$dest"' EXIT
fi
mkdir -p "$dest"

shopt -s nullglob
failed=0
declare -A want=()
for f in "$src"/*.comp; do
  name="$(basename "$f" .comp)"
  want["$name"]=1
  # Compile to a temporary name first so a failed build never leaves a
  # truncated .spv behind for go:embed to pick up.
  if "$glslc" --target-env=vulkan1.2 -O -I "$src" -o "$dest/$name.spv.tmp" "$f"; then
    mv "$dest/$name.spv.tmp" "$dest/$name.spv"
  else
    rm -f "$dest/$name.spv.tmp"
    echo "compile_spirv: $f failed to compile" >&2
    failed=1
  fi
done

if [ "$mode" = build ]; then
  for f in "$out"/*.spv; do
    name="$(basename "$f" .spv)"
    if [ -z "${want[$name]:-}" ]; then
      rm -f "$f"
      echo "compile_spirv: removed $f (no shaders/glsl/$name.comp)"
    fi
  done
  exit "$failed"
fi

problems=()
for name in "${!want[@]}"; do
  if [ ! -f "$dest/$name.spv" ]; then
    continue # its compile error is reported above
  elif [ ! -f "$out/$name.spv" ]; then
    problems+=("missing: shaders/spirv/$name.spv")
  elif ! cmp -s "$dest/$name.spv" "$out/$name.spv"; then
    problems+=("stale:   shaders/spirv/$name.spv")
  fi
done
for f in "$out"/*.spv; do
  name="$(basename "$f" .spv)"
  if [ -z "${want[$name]:-}" ]; then
    problems+=("extra:   shaders/spirv/$name.spv (no shaders/glsl/$name.comp)")
  fi
done
if [ "${#problems[@]}" -gt 0 ]; then
  printf '%s\n' "${problems[@]}" | sort >&2
  echo "compile_spirv: SPIR-V is out of date; run scripts/compile_spirv.sh" >&2
  exit 1
fi
if [ "$failed" -ne 0 ]; then
  exit 1
fi
echo "compile_spirv: ${#want[@]} shader(s) up to date"
