// slices.glsl: a quant block cut into slices of 32 values, decoded to
// integer quants and one affine map per group of values. Shared by the
// matrix kernels that keep quants as integers (matvec.glsl, matmul_q8.glsl)
// or convert them themselves. Include after dequant.glsl.
//
// A slice is 32 values: SPB slices per quant block. Float rows have no
// blocks; their slices are simply consecutive and the last may be partial.
// The macros of type t (dequant.glsl's QT_ ones) give the functions below
// that take a type; the constants are QTYPE's.
#define QT_SPB(t) (QT_KQUANT(t) ? 8u : 1u)
// NG groups of GV vec4s (or words of 4 quants) per slice, one affine map each.
#define QT_NG(t) ((t) == T_Q6_K ? 4u : ((QT_KQUANT(t) || (t) == T_Q4_0) ? 2u : 1u))
#define QT_GV(t) (8u / QT_NG(t))
const uint SPB = QT_SPB(QTYPE);
const uint NG = QT_NG(QTYPE);
const uint GV = QT_GV(QTYPE);

// bytes2 returns bytes 0 and 1 of v as floats.
vec2 bytes2(uint v) {
    return uintBitsToFloat(uvec2(v & 0xFFu, (v >> 8) & 0xFFu) | 0x4B000000u) - 8388608.0;
}

// slice_val returns the offset within its block (floats: within the slice)
// of the first value of group g of slice s of type qt; the group's values
// follow it. Without qt: QTYPE's.
uint slice_val(uint qt, uint s, uint g) {
    if (qt == T_Q4_K || qt == T_Q5_K) {
        // Byte l of 16-byte word s of qs: low nibble is value
        // 64(s/2) + 16(s%2) + l, high nibble that plus 32.
        return 64u * (s >> 1) + 16u * (s & 1u) + 32u * g;
    }
    if (qt == T_Q6_K) {
        // Bytes 8(s%4).. of the ql/qh halves of half s/4 give values
        // 128(s/4) + 32g + 8(s%4).. for the four 2-bit planes g.
        return 128u * (s >> 2) + 32u * g + 8u * (s & 3u);
    }
    return 16u * g; // Q4_0 nibble halves; one group for the rest
}

uint slice_val(uint s, uint g) {
    return slice_val(QTYPE, s, g);
}

// dq_fields decodes slice s of the quant block of type qt (without qt:
// QTYPE) at byte offset b into its quants, one per byte of u[8] (group g
// in u[g*GV ..]; unsigned for the K-quants and Q4_0, signed for Q8_0), and
// the map of each group: its weights are a[g] * q + c[g].
void dq_fields(uint qt, uint b, uint s, out uint u[8], out float a[4], out float c[4]) {
    a = float[4](1.0, 1.0, 1.0, 1.0);
    c = float[4](0.0, 0.0, 0.0, 0.0);
    if (qt == T_Q4_K || qt == T_Q5_K) {
        uvec4 hd = W4[b >> 4]; // d, dmin; scales[12] in hd.yzw
        vec2 dm = unpackHalf2x16(hd.x);
        // The 6-bit scales and mins of sub-blocks 2j and 2j+1, two bytes
        // of a word at a time (ggml's get_scale_min_k4 for a pair).
        uint j = s >> 1, sh = 16u * (j & 1u);
        uint sc = (hd.y >> sh) & 0x3F3Fu, mn = (hd.z >> sh) & 0x3F3Fu;
        if (j >= 2u) {
            uint e = hd.w >> sh;
            sc = (e & 0x0F0Fu) | ((hd.y >> (sh + 2u)) & 0x3030u);
            mn = ((e >> 4) & 0x0F0Fu) | ((hd.z >> (sh + 2u)) & 0x3030u);
        }
        vec2 scf = dm.x * bytes2(sc), mnf = -dm.y * bytes2(mn);
        a[0] = scf.x;
        a[1] = scf.y;
        c[0] = mnf.x;
        c[1] = mnf.y;
        // Q4_K: qs at byte 16. Q5_K: qh[32] at 16 (bit 2j of byte l is the
        // fifth bit of the low nibble, bit 2j+1 of the high), qs at 48.
        uvec4 qs = W4[(b >> 4) + (qt == T_Q4_K ? 1u : 3u) + s];
        uvec4 lo = qs & 0x0F0F0F0Fu, hi = (qs >> 4) & 0x0F0F0F0Fu;
        if (qt == T_Q5_K) {
            uvec4 qh = W4[(b >> 4) + 1u + (s & 1u)];
            lo |= ((qh >> (2u * j)) & 0x01010101u) << 4;
            hi |= ((qh >> (2u * j + 1u)) & 0x01010101u) << 4;
        }
        for (uint i = 0u; i < 4u; i++) {
            u[i] = lo[i];
            u[4u + i] = hi[i];
        }
    } else if (qt == T_Q6_K) {
        // ql[128] at 0, qh[64] at 128, int8 scales[16] at 192, d at 208;
        // blocks are 210 bytes, so words may need stitching (dq_word).
        uint h = s >> 2, o = 8u * (s & 3u);
        uint oa = b + 64u * h + o, oh = b + 128u + 32u * h + o;
        float d = dq_half(b + 208u);
        for (uint w = 0u; w < 2u; w++) {
            uint qa = dq_word(qt, oa + 4u * w), qb = dq_word(qt, oa + 32u + 4u * w), qh = dq_word(qt, oh + 4u * w);
            u[w] = (qa & 0x0F0F0F0Fu) | ((qh << 4) & 0x30303030u);
            u[2u + w] = (qb & 0x0F0F0F0Fu) | ((qh << 2) & 0x30303030u);
            u[4u + w] = ((qa >> 4) & 0x0F0F0F0Fu) | (qh & 0x30303030u);
            u[6u + w] = ((qb >> 4) & 0x0F0F0F0Fu) | ((qh >> 2) & 0x30303030u);
        }
        for (uint g = 0u; g < 4u; g++) {
            // scales[8h + o/16 + 2g] scale plane g of this slice's values.
            uint sb = b + 192u + 8u * h + (o >> 4) + 2u * g;
            a[g] = d * float(bitfieldExtract(int(W[sb >> 2]), int((sb & 3u) * 8u), 8));
            c[g] = -32.0 * a[g];
        }
    } else if (qt == T_Q8_0) {
        a[0] = dq_half(b);
        for (uint i = 0u; i < 8u; i++) {
            u[i] = dq_word(qt, b + 2u + 4u * i);
        }
    } else { // Q4_0
        a[0] = a[1] = dq_half(b);
        c[0] = c[1] = -8.0 * a[0];
        for (uint i = 0u; i < 4u; i++) {
            uint w = dq_word(qt, b + 2u + 4u * i);
            u[i] = w & 0x0F0F0F0Fu;
            u[4u + i] = (w >> 4) & 0x0F0F0F0Fu;
        }
    }
}

void dq_fields(uint b, uint s, out uint u[8], out float a[4], out float c[4]) {
    dq_fields(QTYPE, b, s, u, a, c);
}
