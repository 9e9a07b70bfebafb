// matvec_stack.glsl: the stacked variant of matvec.glsl (STACK defined;
// matvec_stack.comp and matvec_stack_q8.comp): one dispatch computes the
// products of up to three matrices of one row length with the same
// activations (decode's q, k and v; gate and up), all of one type but the
// last (LAST_QTYPE), and finishes each
// row where it is computed instead of in dispatches of their own. In
// decode every dispatch waits for the one before it, and the small ones
// (RoPE, the two KV-cache stores, SwiGLU) cost mostly that wait.
//
// Workgroups [0, g0) compute matrix 0, [g0, g1) matrix 1, [g1, g2)
// matrix 2, ROWS rows each; a workgroup's matrix is uniform, so its
// branches are too. The matrices lie in one weight binding at byte
// offsets w0, w1, w2 (the engine keeps a layer's weights in one buffer).
// Per matrix j (bit j of the masks below), lane 0 takes the reduced sums
// and:
//   - BIAS_MASK: adds bias j (Qwen2's q, k and v biases);
//   - ROPE_MASK: rotates the rows as rope.glsl does, at position pos + n
//     for column n (per-layer base and scale in the push constants,
//     optional frequency factors);
//   - CACHE_MASK: writes the rows as f16 into the KV-cache ring of
//     binding out j, position p in row p mod slots of sequence seq's
//     region (rows seq*slots …; kv_store.comp's rule, a batch longer than
//     the ring keeping its last slots rows); otherwise as f32 into out j.
//   - SEQ_ROWS: column n is one token of a sequence of its own (the
//     server's batched decode), at the position and of the sequence the
//     step binding's pair n gives (a (position, sequence) table), which
//     its rotation and its cache row follow.
// A rotation pair and an f16 word of the cache must come from one
// workgroup, so the rows map to workgroups in pairs (ROWS even): adjacent
// rows for the normal layout; for NeoX, whose pairs are i and
// i + ropeDims/2, each aligned four logical rows 4c..4c+3 of a head are
// the rows 2c, 2c+1, 2c+h, 2c+1+h (h = ropeDims/2, even; ROWS a multiple
// of 4), which holds two pairs and two f16 words.
//
// GATED (1 silu, 2 gelu; two matrices, gate and up, of the same rows): a
// workgroup computes ROWS/2 rows of gate and the same rows of up, and
// writes act(gate) * up to out 0. With GATED_Q8 it also writes the q8
// copy of that product (q8.glsl) for the next product: a 32-value block
// takes the 32/(ROWS/2) workgroups that computed its rows; each counts
// itself done on the block's counter (binding 11) once its values are
// out, and the last one rounds the block and resets the counter for the
// next dispatch. Lane 0 writes the values and counts, so one device-scope
// release/acquire on the counter orders every workgroup's writes before
// the last one's reads.

#extension GL_KHR_memory_scope_semantics : require

layout(constant_id = 7) const uint NMAT = 1;
layout(constant_id = 8) const uint ROPE_MASK = 0;
layout(constant_id = 9) const uint CACHE_MASK = 0;
layout(constant_id = 10) const uint BIAS_MASK = 0;
layout(constant_id = 11) const bool NEOX = false;
layout(constant_id = 12) const bool FREQ_FACTORS = false;
layout(constant_id = 13) const uint GATED = 0;
layout(constant_id = 14) const bool GATED_Q8 = false;
layout(constant_id = 15) const bool SEQ_ROWS = false;
// LAST_QTYPE: the type of matrix NMAT-1, where it is not QTYPE (Q4_K_M's
// Q6_K v beside Q4_K q and k; K-quants both, of 256-value blocks). Its
// workgroups take the slice code of that type (mv_slices in matvec.glsl);
// a workgroup's matrix is uniform, so the branch is too.
layout(constant_id = 16) const uint LAST_QTYPE = 12;

// Outputs: f32 rows, or f16 pairs of a cache row (the uint views).
layout(binding = 0) coherent buffer Out0 { float out0[]; };
layout(binding = 0) coherent buffer Out0W { uint out0w[]; };
layout(binding = 3) writeonly buffer Out1 { float out1[]; };
layout(binding = 3) writeonly buffer Out1W { uint out1w[]; };
layout(binding = 4) writeonly buffer Out2 { float out2[]; };
layout(binding = 4) writeonly buffer Out2W { uint out2w[]; };
layout(binding = 5) readonly buffer Bias0 { float bias0[]; };
layout(binding = 6) readonly buffer Bias1 { float bias1[]; };
layout(binding = 7) readonly buffer Bias2 { float bias2[]; };
layout(binding = 8) readonly buffer Step { uint pos; uint seq; };
layout(binding = 8) readonly buffer StepRows { uvec2 step_rows[]; }; // SEQ_ROWS
layout(binding = 9) readonly buffer Factors { float ff[]; };
layout(binding = 10) writeonly buffer Q8W { uint q8w[]; };
layout(binding = 10) writeonly buffer Q8F { float q8f[]; };
layout(binding = 11) coherent buffer Counts { uint counts[]; };

layout(push_constant) uniform Push {
    uint K;        // values per row
    uint rowBytes; // bytes per row of every matrix (the last: lastRowBytes)
    uint M0, M1, M2;   // rows of each matrix
    uint w0, w1, w2;   // byte offsets of the matrices in the weights binding
    uint g0, g1, g2;   // workgroup ends (g2: all the dispatch's work)
    uint headDim;      // RoPE: values per head
    uint ropeDims;     // rotated dims of a head (even, <= headDim)
    float log2Base;    // log2(freq base)
    float freqScale;
    uint slots;        // rows of the cache rings
    uint lastRowBytes; // bytes per row of matrix NMAT-1 (LAST_QTYPE's)
} pc;

#include "rope.glsl"
#include "glu.glsl"
#include "q8.glsl"

uint st_mat;         // this workgroup's matrix (GATED: 0, gate and up)
uint st_row0;        // its first logical row
uint row_base[ROWS]; // byte offset in W of each of its rows, clamped

#define ROW_BASE(r) row_base[r]

bool bit(uint mask, uint j) { return ((mask >> j) & 1u) != 0u; }

uint mat_rows(uint j) { return j == 0u ? pc.M0 : (j == 1u ? pc.M1 : pc.M2); }
uint mat_off(uint j) { return j == 0u ? pc.w0 : (j == 1u ? pc.w1 : pc.w2); }
uint mat_row_bytes(uint j) { return LAST_QTYPE != QTYPE && j == NMAT - 1u ? pc.lastRowBytes : pc.rowBytes; }

// mat_row is the row of matrix j that logical row l stands for (see the
// NeoX map above; the identity otherwise).
uint mat_row(uint j, uint l) {
    if (!NEOX || !bit(ROPE_MASK, j)) {
        return l;
    }
    uint e = l % pc.headDim;
    if (e < pc.ropeDims) {
        uint t = e & 3u;
        e = (e & ~3u) / 2u + (t & 1u) + (t >> 1) * (pc.ropeDims / 2u);
    }
    return l - l % pc.headDim + e;
}

// stack_rows sets the workgroup's matrix and rows; false if it has none.
bool stack_rows(uint group) {
    uint total = NMAT == 1u ? pc.g0 : (NMAT == 2u ? pc.g1 : pc.g2);
    if (group >= total) {
        return false;
    }
    if (GATED != 0u) {
        const uint RH = ROWS / 2u;
        st_mat = 0u;
        st_row0 = group * RH;
        for (uint r = 0u; r < ROWS; r++) {
            uint j = r < RH ? 0u : 1u;
            uint row = min(st_row0 + r - j * RH, pc.M0 - 1u);
            row_base[r] = mat_off(j) + row * pc.rowBytes;
        }
        return true;
    }
    st_mat = group < pc.g0 ? 0u : (group < pc.g1 ? 1u : 2u);
    uint first = st_mat == 0u ? 0u : (st_mat == 1u ? pc.g0 : pc.g1);
    st_row0 = (group - first) * ROWS;
    uint m = mat_rows(st_mat);
    for (uint r = 0u; r < ROWS; r++) {
        row_base[r] = mat_off(st_mat) + mat_row(st_mat, min(st_row0 + r, m - 1u)) * mat_row_bytes(st_mat);
    }
    return true;
}

void put(uint j, uint i, float v) {
    if (j == 0u) {
        out0[i] = v;
    } else if (j == 1u) {
        out1[i] = v;
    } else {
        out2[i] = v;
    }
}

void put_word(uint j, uint i, uint v) {
    if (j == 0u) {
        out0w[i] = v;
    } else if (j == 1u) {
        out1w[i] = v;
    } else {
        out2w[i] = v;
    }
}

float bias(uint j, uint row) {
    if (!bit(BIAS_MASK, j)) {
        return 0.0;
    }
    return j == 0u ? bias0[row] : (j == 1u ? bias1[row] : bias2[row]);
}

// gated_epilogue writes act(gate) * up for the workgroup's rows and, with
// GATED_Q8, the q8 blocks it finishes.
void gated_epilogue() {
    const uint RH = ROWS / 2u;
    uint m = pc.M0;
    for (uint n = 0u; n < NCOLS; n++) {
        for (uint r = 0u; r < RH; r++) {
            if (st_row0 + r < m) {
                float g = red_v[r * NCOLS + n], u = red_v[(r + RH) * NCOLS + n];
                out0[n * m + st_row0 + r] = glu_act(GATED - 1u, vec4(g)).x * u;
            }
        }
    }
    if (!GATED_Q8) {
        return;
    }
    // RH divides 32 (the Go side checks), so the rows lie in one block.
    uint blk = st_row0 / 32u;
    if (atomicAdd(counts[blk], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquireRelease) !=
        32u / RH - 1u) {
        return;
    }
    uint blocks = NCOLS * m / 32u;
    for (uint n = 0u; n < NCOLS; n++) {
        uint at = n * m + 32u * blk;
        vec4 v[8];
        for (uint i = 0u; i < 8u; i++) {
            v[i] = vec4(out0[at + 4u * i], out0[at + 4u * i + 1u], out0[at + 4u * i + 2u], out0[at + 4u * i + 3u]);
        }
        q8_store(at / 32u, blocks, v);
    }
    // Every workgroup of the block has counted and none will again in this
    // dispatch; a plain store leaves the counter at zero for the next one,
    // which a barrier separates from this.
    counts[blk] = 0u;
}

// stack_epilogue finishes the workgroup's rows (lane 0, after wg_reduce).
void stack_epilogue() {
    if (GATED != 0u) {
        gated_epilogue();
        return;
    }
    uint j = st_mat, m = mat_rows(j);
    for (uint n = 0u; n < NCOLS; n++) {
        // Column n's position, and the first cache row of its sequence
        // (the step is bound only for rotations and caches).
        uint p = 0u, region = 0u;
        if (bit(ROPE_MASK | CACHE_MASK, j)) {
            p = SEQ_ROWS ? step_rows[n].x : pos + n;
            region = (SEQ_ROWS ? step_rows[n].y : seq) * pc.slots;
        }
        float v[ROWS];
        for (uint r = 0u; r < ROWS; r++) {
            v[r] = red_v[r * NCOLS + n] + bias(j, mat_row(j, min(st_row0 + r, m - 1u)));
        }
        if (bit(ROPE_MASK, j)) {
            float rot[ROWS];
            for (uint r = 0u; r < ROWS; r++) {
                uint e = mat_row(j, st_row0 + r) % pc.headDim;
                rot[r] = v[r];
                if (e < pc.ropeDims) {
                    uint i = rope_index(e, pc.ropeDims, NEOX);
                    vec2 cs = rope_cos_sin(i, pc.ropeDims, float(p), pc.log2Base, pc.freqScale,
                                           FREQ_FACTORS ? ff[i] : 1.0);
                    rot[r] = rope_rotate(v[r], v[NEOX ? r ^ 2u : r ^ 1u], rope_first(e, pc.ropeDims, NEOX), cs);
                }
            }
            for (uint r = 0u; r < ROWS; r++) {
                v[r] = rot[r];
            }
        }
        if (bit(CACHE_MASK, j)) {
            // Rows 2i and 2i+1 of the matrix are logical rows r and r + 1
            // for even r, under either map.
            if (SEQ_ROWS || n + pc.slots >= NCOLS) {
                uint at = (region + p % pc.slots) * (m / 2u);
                for (uint r = 0u; r < ROWS; r += 2u) {
                    if (st_row0 + r < m) {
                        put_word(j, at + mat_row(j, st_row0 + r) / 2u, packHalf2x16(vec2(v[r], v[r + 1u])));
                    }
                }
            }
        } else {
            for (uint r = 0u; r < ROWS; r++) {
                if (st_row0 + r < m) {
                    put(j, n * m + mat_row(j, st_row0 + r), v[r]);
                }
            }
        }
    }
}
