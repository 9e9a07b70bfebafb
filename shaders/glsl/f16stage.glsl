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

// A Q6_K piece's words, loaded apart from the arithmetic that decodes
// them (dq_q6_fetch, dq_q6_decode_h) as KRaw's are: its low quant bits
// (ql) of two sub-rows (qa, qb), their high bits (qh), the words that hold
// its 4 scale bytes (sc) and the one that holds the block's d. A block is
// 210 bytes, so every other one starts 2 bytes into a word: a quant word
// is stitched from two there, and the second is loaded only then.
struct Q6Raw {
    uvec2 qa, qb, qh;
    uvec3 sc;
    uint d;
};

// As dq_piece: ql[128] at 0, qh[64] at 128, int8 scales[16] at 192, d at
// 208; piece p = (half h, group g) reads ql/qh bytes 4g..4g+3 of its half
// and the scales at 192 + 8h + g/4 + 2i for its vec4s i.
Q6Raw dq_q6_fetch(uint b, uint p) {
    uint h = p >> 3, g = p & 7u;
    bool odd = (b & 2u) != 0u;
    uint wa = (b + 64u * h + 4u * g) >> 2, wb = wa + 8u, wh = (b + 128u + 32u * h + 4u * g) >> 2;
    uint ws = (b + 192u + 8u * h + (g >> 2)) >> 2;
    Q6Raw r;
    r.qa = uvec2(W[wa], odd ? W[wa + 1u] : 0u);
    r.qb = uvec2(W[wb], odd ? W[wb + 1u] : 0u);
    r.qh = uvec2(W[wh], odd ? W[wh + 1u] : 0u);
    // The 4 scale bytes span 7 bytes from any byte of a word: 2 or 3 words.
    uint so = (b + 192u + 8u * h + (g >> 2)) & 3u;
    r.sc = uvec3(W[ws], W[ws + 1u], so >= 2u ? W[ws + 2u] : 0u);
    r.d = W[(b + 208u) >> 2];
    return r;
}

// q6_word is the little-endian word a raw pair holds at the block's
// alignment (b's bit 1).
uint q6_word(uvec2 w, uint b) { return (b & 2u) == 0u ? w.x : (w.x >> 16) | (w.y << 16); }

// dq_q6_decode_h decodes piece p of the Q6_K block at byte offset b from
// its words r, in halves.
void dq_q6_decode_h(Q6Raw r, uint b, uint p, out uvec2 h[4]) {
    uint hf = p >> 3, g = p & 7u;
    uint qa = q6_word(r.qa, b), qb = q6_word(r.qb, b), qh = q6_word(r.qh, b);
    float d = unpackHalf2x16(r.d >> ((b & 2u) << 3)).x;
    uint so = (b + 192u + 8u * hf + (g >> 2)) & 3u;
    uint q[4];
    dq_q6_quants(qa, qb, qh, q);
    for (uint i = 0u; i < 4u; i++) {
        uint at = so + 2u * i; // the scale's byte among sc's 12
        float sc = float(bitfieldExtract(int(r.sc[at >> 2]), int((at & 3u) * 8u), 8));
        h[i] = h_affine(h_quants(q[i]), float16_t(1056.0), float16_t(d * sc), float16_t(0.0));
    }
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
// dq_piece_h or dq_k_decode_h return it) whose block starts at
// place-in-halves b: two 16-byte stores where the piece is two runs of 8
// (Q4_K, Q5_K; b is then a multiple of 8), else one store a vec4 (dq_off).
void stagePiece(uint b, uint p, uvec2 h[4]) {
    if (QTYPE == T_Q4_K || QTYPE == T_Q5_K) {
        stage8((b + dq_off(p, 0u)) / 4u, h[0], h[1]);
        stage8((b + dq_off(p, 2u)) / 4u, h[2], h[3]);
    } else {
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            stage4((b + dq_off(p, i)) / 4u, h[i]);
        }
    }
}
