package kernels

import "fmt"

// A prefill batch of a mixture-of-experts layer has N tokens of k slots,
// each slot choosing an expert. Packed by expert, the N·k (token, slot)
// pairs are sorted so that an expert's pairs are contiguous, and each
// expert's run is cut into tiles of the prefill matrix product, every tile
// multiplying rows of one expert's weights by a dense block of gathered
// activation rows. A tile's height is the number of pairs it holds, at most
// maxH; the rows past the pairs in a tile are padding (computed, never
// stored).
//
// The naive cut pads every expert's last tile to maxH. The packed cut
// covers an expert's c pairs with ⌊c/maxH⌋ tiles of maxH and the remainder
// r, rounded up to a multiple of minH, with at most one tile of each of
// the heights maxH, maxH/2, …, minH (the binary digits of ⌈r/minH⌉, which
// reach maxH only when r rounds up to it):
// fewer than minH padding rows per chosen expert, against up to maxH−1.
// Heights are powers of two so that each is one pipeline of the tiled
// product, specialised to that height.

// PackTile is one tile of a packed batch: Rows pairs of Expert starting at
// Start in ExpertPack.Perm, in a tile of Height rows (Rows ≤ Height).
type PackTile struct{ Expert, Start, Rows, Height int }

// ExpertPack is a batch's pairs sorted by expert and cut into tiles.
type ExpertPack struct {
	Offsets []int // expert e's pairs are Perm[Offsets[e]:Offsets[e+1]]
	Perm    []int // pair indices (token·k + slot), grouped by expert, ascending within one
	Tiles   []PackTile
}

// PackByExpert sorts the pairs of ids (one expert per pair, each in
// [0, experts)) by expert with a counting sort, as moe_sort.comp does on
// the device, and cuts them into tiles of heights maxH down to minH
// (powers of two, minH ≤ maxH); naive keeps one height, maxH (any, as
// moe_sort.comp's tile list, which is this cut at the product's BN).
func PackByExpert(ids []int, experts, maxH, minH int, naive bool) (*ExpertPack, error) {
	if experts < 1 || minH < 1 || maxH < minH || !naive && (maxH&(maxH-1) != 0 || minH&(minH-1) != 0) {
		return nil, fmt.Errorf("kernels: pack by expert: %d experts, tile heights %d..%d (powers of two)", experts, minH, maxH)
	}
	p := &ExpertPack{Offsets: make([]int, experts+1), Perm: make([]int, len(ids))}
	for i, e := range ids {
		if e < 0 || e >= experts {
			return nil, fmt.Errorf("kernels: pack by expert: pair %d chooses expert %d of %d", i, e, experts)
		}
		p.Offsets[e+1]++
	}
	for e := range experts {
		p.Offsets[e+1] += p.Offsets[e]
	}
	next := append([]int(nil), p.Offsets[:experts]...)
	for i, e := range ids {
		p.Perm[next[e]] = i
		next[e]++
	}
	for e := range experts {
		start, c := p.Offsets[e], p.Offsets[e+1]-p.Offsets[e]
		for ; c >= maxH; c -= maxH {
			p.Tiles = append(p.Tiles, PackTile{Expert: e, Start: start, Rows: maxH, Height: maxH})
			start += maxH
		}
		if c == 0 {
			continue
		}
		if naive {
			p.Tiles = append(p.Tiles, PackTile{Expert: e, Start: start, Rows: c, Height: maxH})
			continue
		}
		units := (c + minH - 1) / minH
		for h := maxH; h >= minH; h /= 2 {
			if units&(h/minH) == 0 {
				continue
			}
			rows := min(h, c)
			p.Tiles = append(p.Tiles, PackTile{Expert: e, Start: start, Rows: rows, Height: h})
			start += rows
			c -= rows
		}
	}
	return p, nil
}

// Padding is the number of padding rows of p's tiles and the rows they
// hold in all.
func (p *ExpertPack) Padding() (pad, rows int) {
	for _, t := range p.Tiles {
		pad += t.Height - t.Rows
		rows += t.Height
	}
	return pad, rows
}
