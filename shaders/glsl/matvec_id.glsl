// matvec_id.glsl: the expert variant of matvec.glsl (MOE_ID defined;
// matvec_id.comp), llama.cpp's mul_mat_id for decode: the weights binding
// holds E experts' matrices of M rows each (expert e's row r at row
// e·M + r), and slot s (token s / k, its (s mod k)-th chosen expert) gets
// dst[s] = W_ids[s] · x_s, x_s being x row s (xPerSlot) or row s / k.
//
// The expert ids come from route.comp on the device, as exact integers in
// f32, so nothing goes through the host inside a token; only the chosen
// experts' rows are read. Workgroups [s·groups, (s+1)·groups) compute slot
// s, ROWS rows each; a workgroup's slot and expert are uniform. An id out
// of range (which route.comp never writes) is clamped to the last expert,
// so a bad input can never read outside the binding.
//
// MOE_SUM (matvec_id_sum.comp) also mixes the slots into the residual, as
// moe_sum.comp does after the plain variant: workgroups
// [t·groups, (t+1)·groups) compute token t's rows for all of its k slots,
// the lanes taking the slices of every slot at once (a lane's expert
// varies from slice to slice; mv_slices), each lane adding
// w_slot · its partial sums, so one reduction yields
// sum_j w_j · (W_j · x_j) and lane 0 adds the residual and writes dst
// once. That removes moe_sum's dispatch, its barrier and the slots'
// outputs' round trip through memory. Against moe_sum's order (each slot
// reduced, weighted, then summed) only the reduction is reassociated,
// which a dot product's error bound already covers; the weights are a
// convex mix (route.comp), so nothing cancels.
//
// MOE_GLU (matvec_id_glu.comp) computes a slot's gate and up products and
// their gated activation in one dispatch, as matvec_stack.glsl's GATED
// does for dense FFNs: the binding spans both experts' stacks (gate's at
// byte wg, up's at wu), a workgroup takes ROWS/2 rows of the slot's gate
// expert and the same rows of its up expert, and lane 0 writes
// act(gate)·up (GLU_ACT: glu.glsl's) as the slot's row of dst. One
// matvec_id and the activation's dispatch and barrier fewer. Its Q8X
// module (matvec_id_glu_q8.comp) reads x in 8 bits, the q8 copy that
// ffn_norm writes as it goes. With GLU_Q8 it also writes the q8 copy of
// its output (q8.glsl) for the down product, as matvec_stack.glsl's
// GATED_Q8: a 32-value block of a slot's row takes the 32/(ROWS/2)
// workgroups that computed its rows; each counts itself done on the
// block's counter (binding 5) once its values are out, and the last one
// rounds the block and resets the counter for the next dispatch.

#ifdef MOE_GLU
// Read back by the last workgroup of a block with GLU_Q8.
layout(binding = 0) coherent buffer Dst { float dst[]; };
#else
layout(binding = 0) writeonly buffer Dst { float dst[]; };
#endif
layout(binding = 3) readonly buffer Ids { float ids[]; };
#ifdef MOE_GLU
#extension GL_KHR_memory_scope_semantics : require
layout(constant_id = 7) const uint GLU_ACT = 0; // glu.glsl's GLU_SILU or GLU_GELU
layout(constant_id = 8) const bool GLU_Q8 = false;
layout(binding = 4) writeonly buffer Q8W { uint q8w[]; };
layout(binding = 4) writeonly buffer Q8F { float q8f[]; };
layout(binding = 5) coherent buffer Counts { uint counts[]; };
#include "glu.glsl"
#include "q8.glsl"
#endif
#ifdef MOE_SUM
layout(binding = 4) readonly buffer Mix { float mixw[]; }; // route's weights, a row per token
// The residual: dst may be it, as matvec.glsl's RESID (each value is read
// just before the invocation that reads it overwrites it).
layout(binding = 5) readonly buffer R { float res[]; };
#endif

layout(push_constant) uniform Push {
    uint M;        // rows of one expert's matrix
    uint K;        // values per row
    uint rowBytes; // bytes per row
    uint groups;   // workgroups per slot (MOE_SUM: per token): ceil(M / ROWS) (MOE_GLU: ROWS/2)
    uint slots;    // N·k
    uint k;        // slots per token (x rows are per token unless xPerSlot)
    uint xPerSlot; // 1: x has a row per slot
    uint experts;  // E
#ifdef MOE_GLU
    uint wg, wu;   // byte offsets of the gate and up experts in the binding
#endif
} pc;

uint row0;      // the workgroup's first row of its expert's matrix
uint id_slot;   // its slot
uint id_expert; // the slot's expert
uint id_xrow;   // the slot's x row
uint id_xbase;  // the same, in vec4s of f32 rows
#ifdef MOE_SUM
uint id_token; // the workgroup's token
float id_w;    // its current slot's weight
#define SLOT_W id_w
#endif

#ifdef MOE_GLU
// Rows r < ROWS/2 are gate's, the rest the same rows of up.
#define ROW_BASE(r) ((r) < ROWS / 2u ? pc.wg + (id_expert * pc.M + min(row0 + (r), pc.M - 1u)) * pc.rowBytes \
                                     : pc.wu + (id_expert * pc.M + min(row0 + (r) - ROWS / 2u, pc.M - 1u)) * pc.rowBytes)
#else
#define ROW_BASE(r) ((id_expert * pc.M + min(row0 + (r), pc.M - 1u)) * pc.rowBytes)
#endif
#define XBASE id_xbase
// Q8X: x in the q8 layout (quantize_q8.comp), its rows per slot or token.
#define Q8ROW id_xrow
#define Q8ROWS (pc.xPerSlot != 0u ? pc.slots : pc.slots / pc.k)

// id_slot_set makes slot s the workgroup's current one.
void id_slot_set(uint s) {
    id_slot = s;
    id_expert = min(uint(ids[s]), pc.experts - 1u);
    id_xrow = pc.xPerSlot != 0u ? s : s / pc.k;
    id_xbase = id_xrow * (pc.K / 4u);
#ifdef MOE_SUM
    id_w = mixw[s];
#endif
}

// id_rows sets the workgroup's rows and (without MOE_SUM) its slot and
// expert; false if it has none.
bool id_rows(uint group) {
#ifdef MOE_SUM
    id_token = group / pc.groups;
    if (id_token >= pc.slots / pc.k) {
        return false;
    }
#else
    if (group / pc.groups >= pc.slots) {
        return false;
    }
    id_slot_set(group / pc.groups);
#endif
#ifdef MOE_GLU
    row0 = (group % pc.groups) * (ROWS / 2u);
#else
    row0 = (group % pc.groups) * ROWS;
#endif
    return true;
}

#ifdef MOE_GLU
// glu_q8 writes, with GLU_Q8, the q8 blocks the workgroup finishes (lane
// 0, after its rows of dst are written). M is a multiple of 32 and ROWS/2
// divides 32 (the Go side checks), so the rows lie in one block.
void glu_q8() {
    if (!GLU_Q8) {
        return;
    }
    uint blk = (id_slot * pc.M + row0) / 32u;
    if (atomicAdd(counts[blk], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquireRelease) !=
        64u / ROWS - 1u) {
        return;
    }
    vec4 v[8];
    for (uint i = 0u; i < 8u; i++) {
        uint at = 32u * blk + 4u * i;
        v[i] = vec4(dst[at], dst[at + 1u], dst[at + 2u], dst[at + 3u]);
    }
    q8_store(blk, pc.slots * pc.M / 32u, v);
    // Every workgroup of the block has counted and none will again in this
    // dispatch; a plain store leaves the counter at zero for the next one,
    // which a barrier separates from this.
    counts[blk] = 0u;
}
#endif
