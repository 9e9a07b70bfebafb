// rope.glsl: the rotation of rotary position embedding, shared by rope.comp
// (f32 in place) and kv_store.comp (K rotated on its way into the f16 cache).
//
// Pair i < dims/2 of a head rotates by theta = position * freqScale *
// base^(-2i/dims) / factor: values (2i, 2i+1) in the normal layout,
// (i, i + dims/2) in the NeoX layout. Values past dims are not rotated.

// rope_cos_sin returns (cos, sin) of pair i's angle at position.
vec2 rope_cos_sin(uint i, uint dims, float position, float log2Base, float freqScale, float factor) {
    float invFreq = freqScale * exp2(-log2Base * float(2u * i) / float(dims)) / factor;
    float theta = position * invFreq;
    // Reduce theta to [0, 2pi) before sin/cos: GPU sin/cos are only accurate
    // on a small range and theta reaches 1e5 at long context. 2pi is split
    // (Cody-Waite) so that k * C1 is exact for k < 2^15.
    const float C1 = 6.28125;
    const float C2 = 1.9353071795864769e-3;
    float k = floor(theta * 0.15915494309189535);
    theta = (theta - k * C1) - k * C2;
    return vec2(cos(theta), sin(theta));
}

// For a value e < dims of a head: its pair is rope_index, it is the pair's
// first value when rope_first, and the pair's other value is rope_partner.
uint rope_index(uint e, uint dims, bool neox) { return neox ? e % (dims / 2u) : e / 2u; }
bool rope_first(uint e, uint dims, bool neox) { return neox ? e < dims / 2u : (e & 1u) == 0u; }
uint rope_partner(uint e, uint dims, bool neox) {
    return neox ? (e < dims / 2u ? e + dims / 2u : e - dims / 2u) : e ^ 1u;
}

// rope_rotate returns value x (with partner p) after the rotation (c, s):
// a first value a becomes a c - b s, a second value b becomes a s + b c.
float rope_rotate(float x, float p, bool first, vec2 cs) {
    return first ? x * cs.x - p * cs.y : p * cs.y + x * cs.x;
}
