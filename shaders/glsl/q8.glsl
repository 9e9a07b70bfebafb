// q8.glsl: writes activations in the q8 layout that matvec_q8 reads: blocks
// of 32 values rounded to 8 bits with one f32 scale each, d = max|x| / 127
// and q = round(x / d), so every q is in [-127, 127] and |x - d*q| <= d/2.
// For `blocks` blocks, block i's values are words 8i..8i+7 (4 to a word)
// and its scale is word 8*blocks + i.
//
// The includer declares the destination as two views of one binding:
//   writeonly buffer ... { uint q8w[]; };  writeonly buffer ... { float q8f[]; };

// q8_store rounds block blk (its 32 values in v) of a run of blocks.
void q8_store(uint blk, uint blocks, vec4 v[8]) {
    float amax = 0.0;
    for (uint j = 0u; j < 8u; j++) {
        vec4 a = abs(v[j]);
        amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
    }
    float id = amax > 0.0 ? 127.0 / amax : 0.0;
    for (uint j = 0u; j < 8u; j++) {
        // Rounding may land a hair past 127 when x*id is 127.0000x.
        uvec4 b = uvec4(clamp(ivec4(roundEven(v[j] * id)), -127, 127)) & 0xFFu;
        q8w[8u * blk + j] = b.x | (b.y << 8) | (b.z << 16) | (b.w << 24);
    }
    q8f[8u * blocks + blk] = amax / 127.0;
}
