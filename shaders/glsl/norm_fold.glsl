// norm_fold.glsl: an RMSNorm folded into the products on either side of
// it, so that decode spends neither a dispatch nor a dependent step on it
// (docs/KERNELS.md, "The norm folded into its neighbours"). In decode a
// norm is one workgroup between two barriers, about 6.5 us on an H200.
//
// The norm of a residual row r is r * s * nw, s = 1/sqrt(mean(r^2) + eps).
// s needs the whole row, which no workgroup of the product writing r
// holds; but the products after the norm are linear in their input, so
// they can take u = r * nw and scale their sums by s at the end, and the
// 8-bit rounding of u is that of r * s * nw up to the same factor.
//
// NORM_OUT (a product writing the residual: matvec.glsl's RESID): the
// workgroups that wrote the 32 rows of a block count themselves done on
// the block's counter (device-scope release/acquire, as
// matvec_stack.glsl's GATED_Q8 does), and the last one reads the block
// back, writes the q8 copy of u (q8.glsl) and the block's sum of squares
// of r, and resets the counter; a workgroup of whole blocks needs no
// counter.
//
// NORM_IN (a product reading that q8 copy): lanes add the column's block
// sums while the weights stream, the sums meet in the product's own
// reduction, and each column's results are scaled by its s before the
// epilogue (biases, rotations and gated activations come after the norm's
// product, so they see the normalised sums).
//
// The includer defines NF_OUT_ID and NF_BIND (NORM_OUT's constant id and
// the first of its four bindings: the norm's weight, the q8 copy, the
// counters, the block sums written), and NF_IN_ID and NF_PARTS (NORM_IN's
// constant id, with NORM_EPS at the next, and the block sums read), or
// leaves either pair undefined where a variant has no such role. One
// dispatch never takes both roles: it would read the sums it writes.
#extension GL_KHR_memory_scope_semantics : require

#ifdef NF_OUT_ID
layout(constant_id = NF_OUT_ID) const bool NORM_OUT = false;
#else
const bool NORM_OUT = false;
#endif
#ifdef NF_IN_ID
layout(constant_id = NF_IN_ID) const bool NORM_IN = false;
layout(constant_id = NF_IN_ID + 1) const float NORM_EPS = 1e-5;
#else
const bool NORM_IN = false;
const float NORM_EPS = 1e-5;
#endif

#ifdef NF_BIND
layout(binding = NF_BIND) readonly buffer NormW { vec4 nw4[]; };
layout(binding = NF_BIND + 1) writeonly buffer Q8W { uint q8w[]; };
layout(binding = NF_BIND + 1) writeonly buffer Q8F { float q8f[]; };
layout(binding = NF_BIND + 2) coherent buffer NormCounts { uint ncounts[]; };
layout(binding = NF_BIND + 3) writeonly buffer NormPartsOut { float npartsOut[]; };
#include "q8.glsl"
#endif
#ifdef NF_PARTS
layout(binding = NF_PARTS) readonly buffer NormParts { float nparts[]; };
#endif

#ifdef NF_BIND
// norm_block writes block blk's q8 copy and sum of squares, its 32 values
// of column c (rows m) being in dst.
void norm_block(uint blk, uint c, uint cols, uint m) {
    vec4 v[8];
    float ss = 0.0;
    uint w0 = (32u * blk - c * m) / 4u; // the block's first weights, in vec4s
    for (uint i = 0u; i < 8u; i++) {
        uint at = 32u * blk + 4u * i;
        vec4 r = vec4(dst[at], dst[at + 1u], dst[at + 2u], dst[at + 3u]);
        ss += dot(r, r);
        v[i] = r * nw4[w0 + i];
    }
    q8_store(blk, cols * m / 32u, v);
    npartsOut[blk] = ss;
}

// norm_out finishes, with NORM_OUT, the blocks of rows row0 .. row0+rows-1
// of column c (of cols, rows m each) once this workgroup's values of them
// are in dst (lane 0, after writing them). rows divides 32 or is a
// multiple of it, and m is a multiple of 32 (the Go side checks). A
// workgroup of whole blocks finishes them itself; smaller ones count.
void norm_out(uint c, uint cols, uint m, uint row0, uint rows) {
    uint blk = (c * m + row0) / 32u;
    if (rows % 32u == 0u) {
        for (uint b = 0u; b < rows / 32u && row0 + 32u * b < m; b++) {
            norm_block(blk + b, c, cols, m);
        }
        return;
    }
    if (atomicAdd(ncounts[blk], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquireRelease) !=
        32u / rows - 1u) {
        return;
    }
    norm_block(blk, c, cols, m);
    // Every workgroup of the block has counted and none will again in this
    // dispatch; a plain store leaves the counter at zero for the next one,
    // which a barrier separates from this.
    ncounts[blk] = 0u;
}
#endif

#ifdef NF_PARTS
// norm_parts returns, with NORM_IN, this lane's share of column c's block
// sums (k values a column, so k/32 sums); nothing otherwise.
float norm_parts(uint c, uint k) {
    float s = 0.0;
    if (NORM_IN) {
        uint nb = k / 32u;
        for (uint i = gl_LocalInvocationID.x; i < nb; i += WG) {
            s += nparts[c * nb + i];
        }
    }
    return s;
}

// norm_scale is s for the reduced sum of squares ss of a row of k values.
float norm_scale(float ss, uint k) { return inversesqrt(ss / float(k) + NORM_EPS); }
#endif
