// f16stage.glsl: the shared stage of decoded weights that the
// cooperative-matrix kernels load their A fragments from: rows of f16
// values whose stride, and every place below, counts f16vec4s (even ones:
// the includer keeps its row strides and fragment offsets even). Define
// STAGE_VEC4S, the stage's size, before including; include after
// coopmat.glsl.
//
// On the matrix units the stage is an array of 16-byte words, so that a
// run of 8 values (two vec4s: a Q4_K or Q5_K piece holds two) is one
// 16-byte store where two 8-byte ones made twice the shared-memory
// transactions: 14336x4096 Q4_K in matvec_coopmat at 16 columns went from
// 76 to 71 us on an H100 (docs/KERNELS.md). The emulation keeps f16vec4s,
// which its fragment loads index.
#ifdef COOPMAT_EMULATE
shared f16vec4 shA[STAGE_VEC4S];

// stage4 writes the 4 values v at place i.
void stage4(uint i, vec4 v) { shA[i] = f16vec4(v); }

// stage8 writes the 8 values v0, v1 at places i, i+1; i is even.
void stage8(uint i, vec4 v0, vec4 v1) {
    shA[i] = f16vec4(v0);
    shA[i + 1u] = f16vec4(v1);
}

// LOAD_STAGE loads fragment a from place off, rows stride apart.
#define LOAD_STAGE(a, off, stride) CM_LOAD_A4(a, shA, off, stride)
#else
shared uvec4 shA[STAGE_VEC4S / 2u];

uvec2 halves4(vec4 v) { return uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw)); }

void stage4(uint i, vec4 v) {
    if ((i & 1u) == 0u) {
        shA[i >> 1].xy = halves4(v);
    } else {
        shA[i >> 1].zw = halves4(v);
    }
}

void stage8(uint i, vec4 v0, vec4 v1) { shA[i >> 1] = uvec4(halves4(v0), halves4(v1)); }

#define LOAD_STAGE(a, off, stride) coopMatLoad(a, shA, (off) / 2u, (stride) / 2u, gl_CooperativeMatrixLayoutRowMajor)
#endif

// stagePiece writes a decoded 16-value piece (v, piece p of its block, as
// dq_piece or dq_k_decode return it) whose block starts at place-in-halves
// b: two 16-byte stores where the piece is two runs of 8 (Q4_K, Q5_K;
// b is then a multiple of 8), else one store a vec4 (dq_off).
void stagePiece(uint b, uint p, vec4 v[4]) {
    if (QTYPE == T_Q4_K || QTYPE == T_Q5_K) {
        stage8((b + dq_off(p, 0u)) / 4u, v[0], v[1]);
        stage8((b + dq_off(p, 2u)) / 4u, v[2], v[3]);
    } else {
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            stage4((b + dq_off(p, i)) / 4u, v[i]);
        }
    }
}
