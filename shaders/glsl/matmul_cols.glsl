// matmul_cols.glsl: which activation row and which result row each column
// of a tiled prefill product is, and which weight rows its tile reads: the
// push constants and the column map shared by matmul.glsl, matmul_q8.glsl
// and matmul_coopmat.glsl. The includer declares BN (columns per tile) and
// WG (invocations per workgroup) first.
//
// Plain (dense) products: column c of the result is x row c and dst row c,
// and workgroup (x, y) computes rows x·BM.. of columns y·BN...
//
// MOE_ID defined (matmul_id.comp, matmul_q8_id.comp, matmul_coopmat_id.comp
// and its emulation): the gathered product of a mixture-of-experts prefill,
// llama.cpp's mul_mat_id. W stacks E experts of M rows (expert e's row r at
// row e·M + r). moe_sort.comp has sorted the batch's (token, slot) pairs by
// expert and cut each expert's run into tiles of at most BN pairs; workgroup
// (x, t) computes rows x·BM.. of tile t's expert for the tile's pairs: its
// column c is sorted position start + c, whose pair p reads x row p / xdiv
// (the token, or the pair itself where x has a row per pair, as the down
// product's) and writes dst row p, the row matvec_id writes for the slot.
// Each expert's weights are thus read once per tile, not once per token.
// Workgroups past the tile count (the grid is sized by the most tiles the
// batch could make) return at once, uniformly.

#ifdef MOE_ID

layout(binding = 3) readonly buffer Sorted { uint srt[]; };

layout(push_constant) uniform Push {
    uint M;        // rows of one expert's matrix
    uint N;        // rows of x (the layout of its scales depends on them)
    uint K;        // values per row
    uint rowBytes; // bytes per row of W
    uint E;        // experts
    uint pairs;    // tokens x slots
    uint xdiv;     // pairs per row of x: slots per token, or 1
} pc;

uint id_w0;           // the tile's expert's first row in W: e·M
uint id_cols;         // the tile's pairs, at most BN
shared uint id_x[BN]; // x row of each column
shared uint id_d[BN]; // dst row (the pair) of each column

// id_tile reads tile t of moe_sort's list into id_w0, id_cols, id_x and
// id_d, ending with a barrier; false (for the whole workgroup) past the
// list. Values out of range, which moe_sort never writes, are clamped so
// that no read leaves its binding.
bool id_tile(uint t) {
    uint T = pc.E + 1u + pc.pairs; // moe_sort's tile count, then its tiles
    if (t >= srt[T]) {
        return false;
    }
    uint e = min(srt[T + 1u + 3u * t], pc.E - 1u);
    uint start = srt[T + 2u + 3u * t];
    id_w0 = e * pc.M;
    id_cols = min(srt[T + 3u + 3u * t], BN);
    for (uint c = gl_LocalInvocationIndex; c < BN; c += WG) {
        uint p = min(srt[pc.E + 1u + min(start + c, pc.pairs - 1u)], pc.pairs - 1u);
        id_x[c] = min(p / max(pc.xdiv, 1u), pc.N - 1u);
        id_d[c] = p;
    }
    barrier();
    return true;
}

#define COL_OK(c) ((c) < id_cols)
#define XROW(c) id_x[c]
#define DROW(c) id_d[c]
#define WROW(r) (id_w0 + (r))

#else

layout(push_constant) uniform Push {
    uint M;        // rows of W
    uint N;        // columns (tokens)
    uint K;        // values per row
    uint rowBytes; // bytes per row of W
} pc;

#define COL_OK(c) ((c) < pc.N)
#define XROW(c) (c)
#define DROW(c) (c)
#define WROW(r) (r)

#endif

// tile_origin sets the workgroup's first weight row m0 and first column n0
// (0 in a gathered tile, whose columns are its own); false where a
// gathered workgroup has no tile.
bool tile_origin(out uint m0, out uint n0) {
    m0 = gl_WorkGroupID.x * BM;
#ifdef MOE_ID
    n0 = 0u;
    return id_tile(gl_WorkGroupID.y);
#else
    n0 = gl_WorkGroupID.y * BN;
    return true;
#endif
}
