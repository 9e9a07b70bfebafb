// dequant.glsl: the one dequantizer behind embed, matvec and matmul.
//
// The includer declares, before including this file:
//   layout(constant_id = N) const uint QTYPE = ...;   // a quant.Type id (ggml type id)
//   a readonly storage buffer holding the raw GGUF bytes as `uint W[];`
//
// Weights are read as 32-bit words and never through 8/16-bit storage, so
// the shaders need no optional device features. Q6_K (210 B), Q8_0 (34 B),
// Q4_0 (18 B) blocks are only 2-byte aligned; dq_word stitches a word from
// two neighbours when its byte offset is 2 mod 4. The binding must therefore
// extend to a multiple of 4 bytes (the Go side checks).
//
// Every format is cut into pieces of 16 values: dq_piece dequantizes one
// piece into four vec4s and dq_off says where each vec4 lies in its block.
// The piece boundaries follow the packing of the format so that the 16 lanes
// reading the 16 pieces of one 256-value superblock read its quants as one
// contiguous span (coalesced), and each lane decodes its scales only once.
// Plain float types (F32, F16, BF16) use 16-value "blocks" of one piece; a
// row's last block may be partial and is zero-filled past `lim`.

const uint T_F32 = 0u;
const uint T_F16 = 1u;
const uint T_Q4_0 = 2u;
const uint T_Q8_0 = 8u;
const uint T_Q4_K = 12u;
const uint T_Q5_K = 13u;
const uint T_Q6_K = 14u;
const uint T_BF16 = 30u;

// A type's properties as macros of its id t, so that they serve both the
// constants of QTYPE below and the kernels that take a second type (the
// stacked products' last matrix, matvec_stack.glsl), whose functions take
// the type as an argument: a constant one folds like QTYPE.
#define QT_KQUANT(t) ((t) == T_Q4_K || (t) == T_Q5_K || (t) == T_Q6_K)
#define QT_FLOAT(t) ((t) == T_F32 || (t) == T_F16 || (t) == T_BF16)
#define QT_K(t) (QT_KQUANT(t) ? 256u : (QT_FLOAT(t) ? 16u : 32u))
#define QT_BYTES(t) ((t) == T_Q4_K ? 144u     \
                   : (t) == T_Q5_K ? 176u     \
                   : (t) == T_Q6_K ? 210u     \
                   : (t) == T_Q8_0 ? 34u      \
                   : (t) == T_Q4_0 ? 18u      \
                   : (t) == T_F32 ? 64u : 32u)
// Blocks whose size is a multiple of 4 keep every word aligned (rows are
// whole blocks), which lets the compiler drop the stitching path.
#define QT_ALIGNED(t) ((QT_BYTES(t) & 3u) == 0u)

const bool QKQUANT = QT_KQUANT(QTYPE);
const bool QFLOAT = QT_FLOAT(QTYPE);
// QK: values per block; QBYTES: bytes per block; QPIECES: 16-value pieces per block.
const uint QK = QT_K(QTYPE);
const uint QBYTES = QT_BYTES(QTYPE);
const uint QPIECES = QK / 16u;
const bool QALIGNED = QT_ALIGNED(QTYPE);

// dq_word returns the little-endian 32-bit word at even byte offset b of a
// row of type qt.
uint dq_word(uint qt, uint b) {
    uint lo = W[b >> 2];
    if (QT_ALIGNED(qt) || (b & 2u) == 0u) {
        return lo;
    }
    return (lo >> 16) | (W[(b >> 2) + 1u] << 16);
}

uint dq_word(uint b) {
    return dq_word(QTYPE, b);
}

// dq_half returns the f16 at even byte offset b as a float.
float dq_half(uint b) {
    return unpackHalf2x16(W[b >> 2] >> ((b & 2u) << 3)).x;
}

// dq_u8x4 returns the four bytes of w, less bias, as floats. It avoids
// integer-to-float conversions, which run at a quarter of the FP32 rate on
// NVIDIA and bound decode there: 2^23 + b has byte b in its mantissa, and
// subtracting 2^23 + bias is exact.
vec4 dq_u8x4(uint w, float bias) {
    uvec4 b = uvec4(w, w >> 8, w >> 16, w >> 24) & 0xFFu;
    return uintBitsToFloat(b | 0x4B000000u) - (8388608.0 + bias);
}
// dq_i8x4 returns the four bytes of w as signed values: flipping the sign
// bits makes them b + 128.
vec4 dq_i8x4(uint w) {
    return dq_u8x4(w ^ 0x80808080u, 128.0);
}

// Q4_K / Q5_K sub-block is (0..7): 6-bit scale and min from scales[12]
// (held in words s0, s1, s2), as ggml's get_scale_min_k4.
// Both cases are computed and selected: lanes of one step hold different
// sub-blocks, and a select does not diverge.
vec2 dq_scale_min_k4(uint s0, uint s1, uint s2, uint is) {
    int k = int(8u * (is & 3u));
    uvec2 lo = uvec2(bitfieldExtract(s0, k, 6), bitfieldExtract(s1, k, 6));
    uint e = bitfieldExtract(s2, k, 8);
    uvec2 hi = uvec2((e & 15u) | (bitfieldExtract(s0, k + 6, 2) << 4),
                     (e >> 4) | (bitfieldExtract(s1, k + 6, 2) << 4));
    return vec2(is < 4u ? lo : hi);
}

// dq_off: offset, within its block, of the first of the 4 values in v[i]
// of piece p.
uint dq_off(uint p, uint i) {
    if (QTYPE == T_Q4_K || QTYPE == T_Q5_K) {
        // Piece p covers bytes 8q..8q+7 of 64-value chunk j: low nibbles are
        // values 64j+8q.., high nibbles 64j+32+8q...
        return 64u * (p >> 2) + 8u * (p & 3u) + 4u * (i & 1u) + 32u * (i >> 1);
    }
    if (QTYPE == T_Q6_K) {
        // Piece p = (half h, group g): ql/qh bytes 4g..4g+3 of the half give
        // values 128h + 32i + 4g...
        return 128u * (p >> 3) + 32u * i + 4u * (p & 7u);
    }
    if (QTYPE == T_Q4_0) {
        return 8u * p + 4u * (i & 1u) + 16u * (i >> 1);
    }
    // Q8_0 and the float types: 16 consecutive values.
    return 16u * p + 4u * i;
}

// A Q4_K or Q5_K piece's words, loaded apart from the arithmetic that
// decodes them (dq_k_fetch, dq_k_decode), so that a kernel can issue the
// loads of its next tile before the work that hides their latency: the
// block's d/dmin and 12 scale bytes (hd), the piece's 8 quant bytes (qs)
// and, for Q5_K, its 8 bytes of fifth bits (qh). All zero decode to zeros.
struct KRaw {
    uvec4 hd;
    uvec2 qs;
    uvec2 qh;
};

//
// With DQ_WIDE defined (the includer binds the weights as uvec4 W4[] and
// uvec2 W2[] too, and their blocks start on 16 bytes) the header is one
// 16-byte load and the quants 8-byte ones, where word loads take four and
// two: fewer load instructions and cache transactions for the same bytes
// (matvec_coopmat, 14336x4096 Q4_K at 16 columns: 71 to 67 us on an H100).
KRaw dq_k_fetch(uint b, uint p) {
    KRaw r;
    uint j = p >> 2, q = p & 3u;
    // Q4_K: qs at byte 16. Q5_K: qh[32] at 16, qs at 48.
    uint qsb = (QTYPE == T_Q4_K ? b + 16u : b + 48u) + 32u * j + 8u * q;
    r.qh = uvec2(0u);
#ifdef DQ_WIDE
    r.hd = W4[b >> 4];
    r.qs = W2[qsb >> 3];
    if (QTYPE == T_Q5_K) {
        r.qh = W2[(b + 16u + 8u * q) >> 3];
    }
#else
    r.hd = uvec4(W[b >> 2], W[(b >> 2) + 1u], W[(b >> 2) + 2u], W[(b >> 2) + 3u]);
    r.qs = uvec2(W[qsb >> 2], W[(qsb >> 2) + 1u]);
    if (QTYPE == T_Q5_K) {
        uint qhw = ((b + 16u) >> 2) + 2u * q;
        r.qh = uvec2(W[qhw], W[qhw + 1u]);
    }
#endif
    return r;
}

// dq_k_maps returns the scales and mins (d0, m0, d1, m1) of a Q4_K or
// Q5_K piece's two runs: run i's values are d_i * q - m_i.
vec4 dq_k_maps(KRaw r, uint p) {
    vec2 dm = unpackHalf2x16(r.hd.x);
    uint j = p >> 2;
    vec2 sm0 = dq_scale_min_k4(r.hd.y, r.hd.z, r.hd.w, 2u * j);
    vec2 sm1 = dq_scale_min_k4(r.hd.y, r.hd.z, r.hd.w, 2u * j + 1u);
    return vec4(dm.x * sm0.x, dm.y * sm0.y, dm.x * sm1.x, dm.y * sm1.y);
}

// dq_k_quants returns a Q4_K or Q5_K piece's quants, one per byte, as
// the 4 words of dq_piece's vec4s.
void dq_k_quants(KRaw r, uint p, out uint q[4]) {
    uint j = p >> 2;
    q[0] = r.qs.x & 0x0F0F0F0Fu;
    q[1] = r.qs.y & 0x0F0F0F0Fu;
    q[2] = (r.qs.x >> 4) & 0x0F0F0F0Fu;
    q[3] = (r.qs.y >> 4) & 0x0F0F0F0Fu;
    if (QTYPE == T_Q5_K) {
        // Bit 2j (low nibbles) and 2j+1 (high nibbles) of qh[l] are the
        // fifth bits.
        q[0] |= ((r.qh.x >> (2u * j)) & 0x01010101u) << 4;
        q[1] |= ((r.qh.y >> (2u * j)) & 0x01010101u) << 4;
        q[2] |= ((r.qh.x >> (2u * j + 1u)) & 0x01010101u) << 4;
        q[3] |= ((r.qh.y >> (2u * j + 1u)) & 0x01010101u) << 4;
    }
}

void dq_k_decode(KRaw r, uint p, out vec4 v[4]) {
    vec4 m = dq_k_maps(r, p);
    uint q[4];
    dq_k_quants(r, p, q);
    v[0] = m.x * dq_u8x4(q[0], 0.0) - m.y;
    v[1] = m.x * dq_u8x4(q[1], 0.0) - m.y;
    v[2] = m.z * dq_u8x4(q[2], 0.0) - m.w;
    v[3] = m.z * dq_u8x4(q[3], 0.0) - m.w;
}

// dq_q6_quants returns a Q6_K piece's 6-bit quants, one per byte, as the
// 4 words of dq_piece's vec4s, from its low bits of two sub-rows (qa, qb)
// and their high bits (qh).
void dq_q6_quants(uint qa, uint qb, uint qh, out uint q[4]) {
    q[0] = (qa & 0x0F0F0F0Fu) | ((qh & 0x03030303u) << 4);
    q[1] = (qb & 0x0F0F0F0Fu) | (((qh >> 2) & 0x03030303u) << 4);
    q[2] = ((qa >> 4) & 0x0F0F0F0Fu) | (((qh >> 4) & 0x03030303u) << 4);
    q[3] = ((qb >> 4) & 0x0F0F0F0Fu) | (((qh >> 6) & 0x03030303u) << 4);
}

// dq_piece dequantizes piece p of the block at byte offset b. lim is the
// number of values of the row from the block's first value on; only float
// blocks can be partial (quantized rows are whole blocks).
void dq_piece(uint b, uint p, uint lim, out vec4 v[4]) {
    if (QTYPE == T_Q4_K || QTYPE == T_Q5_K) {
        dq_k_decode(dq_k_fetch(b, p), p, v);
    } else if (QTYPE == T_Q6_K) {
        // ql[128] at 0, qh[64] at 128, int8 scales[16] at 192, d at 208.
        uint h = p >> 3, g = p & 7u;
        uint qa = dq_word(b + 64u * h + 4u * g);
        uint qb = dq_word(b + 64u * h + 32u + 4u * g);
        uint qh = dq_word(b + 128u + 32u * h + 4u * g);
        float d = dq_half(b + 208u);
        uint q[4];
        dq_q6_quants(qa, qb, qh, q);
        for (uint i = 0u; i < 4u; i++) {
            uint sb = b + 192u + 8u * h + (g >> 2) + 2u * i;
            float sc = float(bitfieldExtract(int(W[sb >> 2]), int((sb & 3u) * 8u), 8));
            v[i] = (d * sc) * dq_u8x4(q[i], 32.0);
        }
    } else if (QTYPE == T_Q8_0) {
        float d = dq_half(b);
        for (uint i = 0u; i < 4u; i++) {
            v[i] = d * dq_i8x4(dq_word(b + 2u + 16u * p + 4u * i));
        }
    } else if (QTYPE == T_Q4_0) {
        float d = dq_half(b);
        uint w0 = dq_word(b + 2u + 8u * p), w1 = dq_word(b + 6u + 8u * p);
        v[0] = d * dq_u8x4(w0 & 0x0F0F0F0Fu, 8.0);
        v[1] = d * dq_u8x4(w1 & 0x0F0F0F0Fu, 8.0);
        v[2] = d * dq_u8x4((w0 >> 4) & 0x0F0F0F0Fu, 8.0);
        v[3] = d * dq_u8x4((w1 >> 4) & 0x0F0F0F0Fu, 8.0);
    } else {
        // Float blocks of 16 values; rows hold a multiple of 4 values, so a
        // partial block ends on a vec4 boundary.
        for (uint i = 0u; i < 4u; i++) {
            v[i] = vec4(0.0);
            if (4u * i >= lim) {
                continue;
            }
            if (QTYPE == T_F32) {
                uint o = (b >> 2) + 4u * i;
                v[i] = uintBitsToFloat(uvec4(W[o], W[o + 1u], W[o + 2u], W[o + 3u]));
            } else {
                uint w0 = W[(b >> 2) + 2u * i], w1 = W[(b >> 2) + 2u * i + 1u];
                if (QTYPE == T_F16) {
                    v[i] = vec4(unpackHalf2x16(w0), unpackHalf2x16(w1));
                } else {
                    v[i] = uintBitsToFloat(uvec4(w0 << 16, w0 & 0xFFFF0000u, w1 << 16, w1 & 0xFFFF0000u));
                }
            }
        }
    }
}
