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

layout(binding = 0) writeonly buffer Dst { float dst[]; };
layout(binding = 3) readonly buffer Ids { float ids[]; };

layout(push_constant) uniform Push {
    uint M;        // rows of one expert's matrix
    uint K;        // values per row
    uint rowBytes; // bytes per row
    uint groups;   // workgroups per slot: ceil(M / ROWS)
    uint slots;    // N·k
    uint k;        // slots per token (x rows are per token unless xPerSlot)
    uint xPerSlot; // 1: x has a row per slot
    uint experts;  // E
} pc;

uint row0;      // the workgroup's first row of its expert's matrix
uint id_slot;   // its slot
uint id_expert; // the slot's expert
uint id_xbase;  // the slot's x row, in vec4s

#define ROW_BASE(r) ((id_expert * pc.M + min(row0 + (r), pc.M - 1u)) * pc.rowBytes)
#define XBASE id_xbase

// id_rows sets the workgroup's slot, expert and rows; false if it has none.
bool id_rows(uint group) {
    id_slot = group / pc.groups;
    if (id_slot >= pc.slots) {
        return false;
    }
    row0 = (group % pc.groups) * ROWS;
    id_expert = min(uint(ids[id_slot]), pc.experts - 1u);
    id_xbase = (pc.xPerSlot != 0u ? id_slot : id_slot / pc.k) * (pc.K / 4u);
    return true;
}
