// Shared by the flash-attention kernels (flash_attn.comp, tiles of query
// rows; flash_attn_decode.comp, one query with keys spread over the lanes):
// their specialization constants, push constants, bindings and the f16 K/V
// loads. flashattn passes every kernel the same constants.

#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require

// Geometry: attention.Plan, in the order flashattn passes them.
layout(constant_id = 0) const uint D = 128;      // head dim
layout(constant_id = 1) const uint W = 32;       // lanes in the lane group (= workgroup size)
layout(constant_id = 2) const uint SG = 32;      // hardware subgroup size the pipeline runs with
layout(constant_id = 3) const uint BR = 1;       // query positions per workgroup
layout(constant_id = 4) const uint HG = 1;       // q-heads per workgroup
layout(constant_id = 5) const uint BC = 32;      // keys per tile (decode: per step of the workgroup)
layout(constant_id = 6) const uint RL = 4;       // slots: of rows, a power of two >= BR*HG (decode: of keys)
layout(constant_id = 7) const uint CH = 8;       // f16 values per load: 8, 4 or 2
layout(constant_id = 8) const bool MASK = false; // additive mask bound
layout(constant_id = 9) const bool SPLIT = false;// write split partials
layout(constant_id = 10) const bool STAGE = false;// K and V tiles converted once into shared memory

layout(local_size_x_id = 1) in;

// Masked scores are a large finite negative rather than -inf: Vulkan does not
// promise inf arithmetic without float controls, and exp2(NEG - x) is 0.
const float NEG = -1.0e30;
const float NEG_HALF = -0.5e30;
const float LOG2E = 1.4426950408889634;

layout(push_constant) uniform Push {
    uint n_q;         // queries in the batch
    uint n_head;      // query heads
    uint n_kv_head;   // KV heads
    uint ctx;         // rows of the K/V caches (a ring, see ring_row), and f16 values per mask row
    float scale;      // multiplies q·k
    uint window;      // keys a query sees at most (a sliding window); 0: every earlier one
} pc;

layout(std430, binding = 0) readonly buffer BQ { float q_in[]; };   // [n_q][n_head*D]
// K and V: f16 [position][n_kv_head*D], read CH values at a time.
layout(std430, binding = 1) readonly buffer BK1 { uint k1[]; };
layout(std430, binding = 1) readonly buffer BK2 { uvec2 k2[]; };
layout(std430, binding = 1) readonly buffer BK4 { uvec4 k4[]; };
layout(std430, binding = 2) readonly buffer BV1 { uint v1[]; };
layout(std430, binding = 2) readonly buffer BV2 { uvec2 v2[]; };
layout(std430, binding = 2) readonly buffer BV4 { uvec4 v4[]; };
layout(std430, binding = 3) readonly buffer BM { uint mask_in[]; }; // f16 [n_q][ctx]
// The step: the batch's first position and its sequence, whose region of
// the caches (ctx rows from row step_seq * ctx) the keys are read from.
layout(std430, binding = 4) readonly buffer BS { uint step_pos; uint step_seq; };
// Output: f32 [n_q][n_head*D], or with SPLIT the partials [split][n_q][n_head][D].
// Coherent: flash_attn_decode.comp reads other workgroups' partials back.
layout(std430, binding = 5) coherent writeonly buffer BO { float o_out[]; };
layout(std430, binding = 6) coherent writeonly buffer BML { vec2 ml_out[]; }; // [split][n_q][n_head]

// K and V are f16, turned into floats by unpackHalf2x16. Decoding them with
// integer instructions straight into f32 bits (exact, with 2^112 folded into
// Q and the softmax weights) was tried until the fourth session: on the
// H200 it made decode 10 % and staged prefill 5 % slower than the
// conversion instructions.
//
// e indexes f16 values and is a multiple of CH; the branches on CH fold away
// at specialization.
uvec4 load_k(uint e) {
    if (CH == 8) return k4[e / 8];
    if (CH == 4) return uvec4(k2[e / 4], 0u, 0u);
    return uvec4(k1[e / 2], 0u, 0u, 0u);
}

uvec4 load_v(uint e) {
    if (CH == 8) return v4[e / 8];
    if (CH == 4) return uvec4(v2[e / 4], 0u, 0u);
    return uvec4(v1[e / 2], 0u, 0u, 0u);
}

// Keys are addressed by position. The caches are rings of ctx rows
// (kv_store.comp): position k is row k mod ctx, so a sliding-window layer
// keeps only its window and a global one (ctx = the context, positions
// below it) every position.
//
// first_key returns the first key position a query at position p sees:
// p - window + 1 with a sliding window, else 0, and never a position the
// ring no longer holds once the batch's n rows of the query's sequence
// (from pos on) are stored (before pos + n - ctx; where the ring holds
// window + n - 1 rows that never cuts a window). n is n_q, or 1 where each
// query is a sequence of its own (flash_attn_decode.comp's SEQ_ROWS).
uint first_key(uint pos, uint n, uint p) {
    uint first = pos + n > pc.ctx ? pos + n - pc.ctx : 0u;
    if (pc.window > 0u && p + 1u > pc.window) {
        first = max(first, p + 1u - pc.window);
    }
    return first;
}

// key_split is key_range's keys with a share of at least least tiles, and
// (z) how many splits have keys: those from it on have none.
uvec3 key_split(uint pos, uint n, uint q0, uint end, uint least) {
    const uint first = first_key(pos, n, q0);
    const uint nsplit = gl_NumWorkGroups.z;
    const uint share = max(((end - first + nsplit - 1u) / nsplit + BC - 1u) / BC, least) * BC;
    const uint kb = min(first + gl_WorkGroupID.z * share, end);
    return uvec3(kb, min(kb + share, end), max((end - first + share - 1u) / share, 1u));
}

// key_range returns this workgroup's keys [kb, ke), positions: its split's
// share (gl_WorkGroupID.z of gl_NumWorkGroups.z, in whole tiles of BC) of
// the keys its queries see, from first_key of its first query (at q0) to
// end, one past its last query (the causal limit). Keys before the window
// of its first query are never visited: a sliding-window layer costs
// O(window), not O(depth). The range spans at most ctx positions.
uvec2 key_range(uint pos, uint n, uint q0, uint end) {
    return key_split(pos, n, q0, end, 1u).xy;
}

// ring_row returns the cache row of key position k in [kb, ke) of the
// range ring_init(kb) set up: the range spans at most ctx positions, so it
// wraps at most once and a compare replaces the modulo.
uint ring_base;

void ring_init(uint kb) {
    ring_base = kb - kb % pc.ctx;
}

uint ring_row(uint k) {
    const uint r = k - ring_base;
    return r >= pc.ctx ? r - pc.ctx : r;
}

// mask_log2 returns entry idx of the f16 mask in log2 units, or NEG where
// it is -inf (or NaN): such keys stay masked.
float mask_log2(uint idx) {
    const vec2 h = unpackHalf2x16(mask_in[idx / 2]);
    const float x = ((idx & 1u) != 0u ? h.y : h.x) * LOG2E;
    return x > NEG_HALF ? x : NEG;
}
