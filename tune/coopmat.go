package tune

import (
	"fmt"
	"slices"

	"github.com/vkinfer/vkinfer/coopmat"
	"github.com/vkinfer/vkinfer/quant"
	"github.com/vkinfer/vkinfer/vk"
	"github.com/vkinfer/vkinfer/vk/kernels"
)

// quickCoopTiles are the matmul_coopmat tiles of a quick sweep: small
// enough for lavapipe's 32 KiB of shared memory with the emulation's
// 8-invocation subgroups, one whose K step of 64 leaves Q6_K to the
// built-in tile.
var quickCoopTiles = []kernels.CoopTile{
	{BM: 32, BN: 32, WM: 16, WN: 16, BK: 64, KC: 32},
	{BM: 32, BN: 64, WM: 32, WN: 32, BK: 128, KC: 32},
	{BM: 64, BN: 32, WM: 32, WN: 32, BK: 128, KC: 64},
}

// builtinCoop is how a sweep and a profile name matmul_coopmat's built-in
// choice, the zero tile: a tile per weight type (kernels.CoopTileFor).
const builtinCoop = "built-in"

// defaultCoopTiles are the matmul_coopmat tiles to try for m:
// kernels.CoopTiles (quickCoopTiles with quick) less those that differ
// from the built-in choice on none of m's weight types, because the device
// cannot run them (shared memory, invocations, fragment shape) or their K
// step takes none of the types, or because they are the built-in tile of
// every type they take. The table then holds no variant that could only
// ever measure the built-in one again.
func defaultCoopTiles(k *kernels.Kernels, m Model, quick bool) []kernels.CoopTile {
	tiles := kernels.CoopTiles
	if quick {
		tiles = quickCoopTiles
	}
	return slices.DeleteFunc(slices.Clone(tiles), func(tile kernels.CoopTile) bool {
		return !slices.ContainsFunc(m.Matrices, func(mat Matrix) bool {
			return kernels.HasCoop(mat.Type) && k.CheckCoopTile(tile, mat.Type) == nil && tile != k.CoopTileFor(mat.Type)
		})
	})
}

// matmulCoop sweeps the tile of the cooperative-matrix prefill product
// over the matrices of m it takes, on activations rounded to f16 on the
// device (matrixCase.toF16; the rounding is not timed, as the engine's
// QuantizeF16 runs once for all the products of the same activations).
//
// The engine applies one tile, the profile's, to every weight type it
// takes, and the built-in tile of the type to the others
// (kernels.CoopTileFor): Q6_K's pieces need K steps of 128, which the
// fastest Q4_K tiles (steps of 64) do not hold. The sweep measures the
// same way: a tile's cells on the matrices it does not take are not run
// and marked Fallback, and the choice counts the built-in's time there, so
// that a tile that only takes Q4_K can still win a Q4_K_M model's sweep,
// as it would run in the engine. The built-in choice itself is a variant
// (the reference, named after the tile it takes on each matrix); where it
// wins, the profile's section is empty ({}), which keeps it.
func (sw *sweeper) matmulCoop(m Model, r *Report, p *Profile) error {
	tiles := sw.o.TilesCoop
	if tiles == nil {
		k := sw.newKernels()
		tiles = defaultCoopTiles(k, m, sw.o.Quick)
		k.Close()
	}
	t, ok, err := sweepGeometry(sw, m, r, KernelMatMulCoop, sw.columns(), tiles,
		func(k *kernels.Kernels) kernels.CoopTile { return k.CoopTiled }, // zero: the built-in choice
		func(k *kernels.Kernels, t, def kernels.CoopTile) matVariant {
			v := matVariant{name: t.String(), ref: t == def, def: t == def, f16All: true,
				rec: func(k *kernels.Kernels, s *vk.Sequence, dst, w, xh vk.Binding, qt quant.Type, n, rows, K int) error {
					return k.MatMulCoop(s, dst, w, xh, qt, n, rows, K, t)
				},
				takes: func(mat Matrix) error { return k.CheckCoopTile(t, mat.Type) }}
			if t == def {
				// The built-in choice is per shape, as the engine makes it
				// (CoopTileForShape), not one tile per type: a reference
				// that runs tiles the engine never runs would let a
				// profile replace better per-shape choices.
				cols := sw.columns()
				v.name, v.takes = builtinCoop, nil
				v.on = func(mat Matrix) string { return k.CoopTileForShape(mat.Type, mat.Rows, cols).String() }
				v.rec = func(k *kernels.Kernels, s *vk.Sequence, dst, w, xh vk.Binding, qt quant.Type, n, rows, K int) error {
					return k.MatMulCoop(s, dst, w, xh, qt, n, rows, K, k.CoopTileForShape(qt, rows, n))
				}
			}
			return v
		})
	if ok {
		c := matMulCoopOf(t)
		p.MatMulCoop = &c
	}
	return err
}

// MatMulCoop is the cooperative-matrix prefill product's tile
// (kernels.CoopTile), in a profile's matmul_coopmat section. The engine
// applies it to the weight types it takes and keeps the built-in tile for
// the others (kernels.CoopTileFor). Every field 0 (an empty section, {})
// is the built-in choice, measured best.
type MatMulCoop struct {
	BM int `json:"bm,omitempty"`
	BN int `json:"bn,omitempty"`
	WM int `json:"wm,omitempty"`
	WN int `json:"wn,omitempty"`
	BK int `json:"bk,omitempty"`
	KC int `json:"kc,omitempty"`
}

// matMulCoopOf is the matmul_coopmat section of a tile.
func matMulCoopOf(t kernels.CoopTile) MatMulCoop {
	return MatMulCoop{BM: t.BM, BN: t.BN, WM: t.WM, WN: t.WN, BK: t.BK, KC: t.KC}
}

// Tile converts m to the kernels' type.
func (m MatMulCoop) Tile() kernels.CoopTile {
	return kernels.CoopTile{BM: m.BM, BN: m.BN, WM: m.WM, WN: m.WN, BK: m.BK, KC: m.KC}
}

// String is the tile's notation, BMxBN/WMxWN/kBK/cKC, or built-in.
func (m MatMulCoop) String() string {
	if m == (MatMulCoop{}) {
		return builtinCoop
	}
	return m.Tile().String()
}

// check reports whether m is a tile the device can run for some weight
// type, so that a damaged profile fails when read rather than fall back to
// the built-in tile without a word. It repeats kernels.CheckCoopTile's
// rules without a weight type (those the tile's K step does not take keep
// the built-in tile), taking the fragment shape and subgroup size from the
// device's policy; where the policy is off the engine never runs the
// kernel, and only the tile's own consistency is checked.
func (m MatMulCoop) check(info vk.DeviceInfo) error {
	t := m.Tile()
	bad := func(why string) error { return fmt.Errorf("matmul_coopmat tile %v: %s", t, why) }
	switch {
	case m == MatMulCoop{}:
		return nil
	case t.BM < 1 || t.BN < 1 || t.WM < 1 || t.WN < 1 || t.BK < 1 || t.KC < 1:
		return bad("sizes must be positive")
	case t.BM%t.WM != 0 || t.BN%t.WN != 0:
		return bad("subgroup parts must divide the tile")
	case t.BK%t.KC != 0 || t.KC%8 != 0:
		return bad("the activation chunk must divide the K step and be a multiple of 8")
	case t.BK%16 != 0:
		return bad("the K step holds no weight type's run of values (16 of the float types at the least)")
	}
	c := coopmat.Choose(kernels.CoopDevice(info))
	if !c.On() {
		return nil
	}
	f, sg := c.F16, c.Subgroup
	if sg == 0 {
		sg = info.SubgroupSize
	}
	switch {
	case t.WM%f.M != 0 || t.WN%f.N != 0 || t.KC%f.K != 0:
		return bad(fmt.Sprintf("needs parts of whole %v fragments", f))
	case t.Subgroups()*sg > info.MaxWorkgroupInvocations:
		return bad(fmt.Sprintf("needs %d invocations, device allows %d", t.Subgroups()*sg, info.MaxWorkgroupInvocations))
	case t.SharedBytes(f.M, f.N) > info.SharedMemory:
		return bad(fmt.Sprintf("needs %d bytes of shared memory, device has %d", t.SharedBytes(f.M, f.N), info.SharedMemory))
	}
	return nil
}
