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

// stage4 writes the 4 halves h (h.x's low half first) at place i.
void stage4(uint i, uvec2 h) { shA[i] = f16vec4(unpackFloat2x16(h.x), unpackFloat2x16(h.y)); }

// stage8 writes the 8 halves h0, h1 at places i, i+1; i is even.
void stage8(uint i, uvec2 h0, uvec2 h1) {
    stage4(i, h0);
    stage4(i + 1u, h1);
}

// LOAD_STAGE loads fragment a from place off, rows stride apart.
#define LOAD_STAGE(a, off, stride) CM_LOAD_A4(a, shA, off, stride)
#else
shared uvec4 shA[STAGE_VEC4S / 2u];

void stage4(uint i, uvec2 h) {
    if ((i & 1u) == 0u) {
        shA[i >> 1].xy = h;
    } else {
        shA[i >> 1].zw = h;
    }
}

void stage8(uint i, uvec2 h0, uvec2 h1) { shA[i >> 1] = uvec4(h0, h1); }

#define LOAD_STAGE(a, off, stride) coopMatLoad(a, shA, (off) / 2u, (stride) / 2u, gl_CooperativeMatrixLayoutRowMajor)
#endif

// Pieces reach the stage as packed halves: uvec2 h[4], h[i] the 4 values
// that dq_piece's v[i] holds, the first in the low half of h[i].x.
//
// The K-quants decode in f16 arithmetic, two values an instruction, where
// dq_piece's f32 path spends a conversion to float, a subtraction and a
// multiply-add per value and then a conversion to f16 per two: a quant q
// of at most 10 bits becomes the half 1024 + q by an or into its mantissa,
// subtracting 1024 (plus an offset) from it is exact, and one multiply-add
// with the group's scale and min, rounded to f16 once, is the weight. The
// scale and min are rounded to f16 first, which adds an error of the
// order of the stage's own rounding (both are 2^-11 relative).
uvec2 halves4(vec4 v) { return uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw)); }

// h_quants returns the 4 bytes of w (each below 1024 as a value) as the
// halves 1024 + byte, in order.
uvec2 h_quants(uint w) {
    uint e0 = w & 0x00FF00FFu, e1 = (w >> 8) & 0x00FF00FFu;
    return uvec2((e0 & 0xFFFFu) | (e1 << 16), (e0 >> 16) | (e1 & 0xFFFF0000u)) | 0x64006400u;
}

// h_affine returns a * (x - off) + c for the halves of x.
uvec2 h_affine(uvec2 x, float16_t off, float16_t a, float16_t c) {
    f16vec2 av = f16vec2(a), cv = f16vec2(c), ov = f16vec2(off);
    return uvec2(packFloat2x16(fma(unpackFloat2x16(x.x) - ov, av, cv)),
                 packFloat2x16(fma(unpackFloat2x16(x.y) - ov, av, cv)));
}

// dq_k_decode_h is dq_k_decode in halves.
void dq_k_decode_h(KRaw r, uint p, out uvec2 h[4]) {
    vec4 m = dq_k_maps(r, p);
    float16_t a0 = float16_t(m.x), c0 = float16_t(-m.y), a1 = float16_t(m.z), c1 = float16_t(-m.w);
    uint q[4];
    dq_k_quants(r, p, q);
    const float16_t off = float16_t(1024.0);
    h[0] = h_affine(h_quants(q[0]), off, a0, c0);
    h[1] = h_affine(h_quants(q[1]), off, a0, c0);
    h[2] = h_affine(h_quants(q[2]), off, a1, c1);
    h[3] = h_affine(h_quants(q[3]), off, a1, c1);
}

// The stage cuts Q6_K into pieces of its own, not dequant.glsl's: piece p
// of a block covers the same 16 places as a Q4_K piece (stagePiece), 8
// values of each 32-value half of the 64-value run p/4, so that a K step
// need hold only 64 values of Q6_K, as of Q4_K, and a piece is two runs
// of 8, two 16-byte stores. dequant.glsl's Q6_K pieces span a 128-value
// half of a block, which made the tiles of every staged kernel take
// 128-value steps for Q6_K weights (docs/KERNELS.md). In ggml's layout
// (ql[128] at 0, qh[64] at 128, int8 scales[16] at 192, d at 208), value
// 128h + 32t + l of a block (t < 4, l < 32) is the low (t < 2) or high
// nibble of ql[64h + 32(t&1) + l] with bits 2t, 2t+1 of qh[32h + l] above
// it, times d and scale 8h + 2t + l/16. Piece p = (half h, run s, group g)
// takes t = 2s and 2s+1, l = 8g..8g+7: 8 bytes of ql from each of the
// half's two rows, the 8 bytes of qh under them and 2 scales. Its words
// are loaded apart from the arithmetic that decodes them (dq_q6_fetch,
// dq_q6_decode_h) as KRaw's are. A block is 210 bytes, so every other one
// starts 2 bytes into a word: a run of 8 bytes is stitched from three
// words there, and the third is loaded only then.
struct Q6Raw {
    uvec3 qa, qb, qh;
    uvec2 sc;
    uint d;
};

// q6_run8 loads the 8 bytes at even byte offset a: two words, three where
// a is 2 mod 4.
uvec3 q6_run8(uint a) {
    uint w = a >> 2;
    return uvec3(W[w], W[w + 1u], (a & 2u) != 0u ? W[w + 2u] : 0u);
}

// q6_sc is the byte offset of piece p's first scale; its second is 2 on.
uint q6_sc(uint b, uint p) { return b + 192u + 8u * (p >> 3) + 4u * ((p >> 2) & 1u) + ((p & 3u) >> 1); }

Q6Raw dq_q6_fetch(uint b, uint p) {
    uint a = b + 64u * (p >> 3) + 8u * (p & 3u);
    Q6Raw r;
    r.qa = q6_run8(a);
    r.qb = q6_run8(a + 32u);
    r.qh = q6_run8(b + 128u + 32u * (p >> 3) + 8u * (p & 3u));
    // The 2 scale bytes span 3 bytes from any byte of a word: 1 or 2 words.
    uint sb = q6_sc(b, p);
    r.sc = uvec2(W[sb >> 2], (sb & 3u) >= 2u ? W[(sb >> 2) + 1u] : 0u);
    r.d = W[(b + 208u) >> 2];
    return r;
}

// q6_words is the little-endian pair of words a raw run holds at the
// block's alignment (b's bit 1).
uvec2 q6_words(uvec3 w, uint b) {
    return (b & 2u) == 0u ? w.xy : uvec2((w.x >> 16) | (w.y << 16), (w.y >> 16) | (w.z << 16));
}

// dq_q6_decode_h decodes piece p of the Q6_K block at byte offset b from
// its words r, in halves.
void dq_q6_decode_h(Q6Raw r, uint b, uint p, out uvec2 h[4]) {
    uvec2 qa = q6_words(r.qa, b), qb = q6_words(r.qb, b), qh = q6_words(r.qh, b);
    uint ns = 4u * ((p >> 2) & 1u); // the nibble, and the first of qh's 4 bits
    uint q[4];
    q[0] = ((qa.x >> ns) & 0x0F0F0F0Fu) | (((qh.x >> ns) & 0x03030303u) << 4);
    q[1] = ((qa.y >> ns) & 0x0F0F0F0Fu) | (((qh.y >> ns) & 0x03030303u) << 4);
    q[2] = ((qb.x >> ns) & 0x0F0F0F0Fu) | (((qh.x >> (ns + 2u)) & 0x03030303u) << 4);
    q[3] = ((qb.y >> ns) & 0x0F0F0F0Fu) | (((qh.y >> (ns + 2u)) & 0x03030303u) << 4);
    float d = unpackHalf2x16(r.d >> ((b & 2u) << 3)).x;
    uint at = q6_sc(b, p) & 3u; // the first scale's byte among sc's 8
    float16_t a0 = float16_t(d * float(bitfieldExtract(int(r.sc[at >> 2]), int((at & 3u) * 8u), 8)));
    at += 2u;
    float16_t a1 = float16_t(d * float(bitfieldExtract(int(r.sc[at >> 2]), int((at & 3u) * 8u), 8)));
    const float16_t off = float16_t(1056.0), zero = float16_t(0.0);
    h[0] = h_affine(h_quants(q[0]), off, a0, zero);
    h[1] = h_affine(h_quants(q[1]), off, a0, zero);
    h[2] = h_affine(h_quants(q[2]), off, a1, zero);
    h[3] = h_affine(h_quants(q[3]), off, a1, zero);
}

// dq_piece_h is dq_piece in halves: Q4_K, Q5_K and Q6_K decode in f16
// arithmetic, the other types through dq_piece's floats.
void dq_piece_h(uint b, uint p, uint lim, out uvec2 h[4]) {
    if (QTYPE == T_Q4_K || QTYPE == T_Q5_K) {
        dq_k_decode_h(dq_k_fetch(b, p), p, h);
    } else if (QTYPE == T_Q6_K) {
        dq_q6_decode_h(dq_q6_fetch(b, p), b, p, h);
    } else {
        vec4 v[4];
        dq_piece(b, p, lim, v);
        for (uint i = 0u; i < 4u; i++) {
            h[i] = halves4(v[i]);
        }
    }
}

// stagePiece writes a decoded 16-value piece (h, piece p of its block, as
// dq_piece_h, dq_k_decode_h or dq_q6_decode_h return it) whose block starts
// at place-in-halves b. A K-quant piece (Q6_K's as the stage cuts it) is
// two runs of 8, values 8(p%4).. of each 32-value half of the block's
// 64-value run p/4: two 16-byte stores (b is then a multiple of 8). The
// others take one store a vec4, where dq_off places it.
void stagePiece(uint b, uint p, uvec2 h[4]) {
    if (QKQUANT) {
        uint at = b + 64u * (p >> 2) + 8u * (p & 3u);
        stage8(at / 4u, h[0], h[1]);
        stage8((at + 32u) / 4u, h[2], h[3]);
    } else {
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            stage4((b + dq_off(p, i)) / 4u, h[i]);
        }
    }
}
