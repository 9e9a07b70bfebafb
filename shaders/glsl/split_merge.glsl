// split_merge.glsl: merges the split-k partials of flash attention. For each
// (query, head) row, M = max m_s, w_s = exp2(m_s - M) and
// O = Σ w_s O_s / Σ w_s l_s (m in log2 units). Empty splits (m = NEG, l = 0)
// weigh nothing; a row with no live key in any split outputs 0, as the
// unsplit kernels do.
//
// Two kernels run it: flash_attn_reduce.comp, a pass of one workgroup per
// row after prefill's split-k, and flash_attn_decode.comp, whose last split
// to finish a workgroup's rows merges them itself (no second pass).
//
// The merge reads splits × D floats per row and is latency bound, so a
// workgroup's SM_N invocations split both ways: vec4 columns of the rows
// (items) × split lanes, each merging every SLN-th split. A lane merges its
// splits online, with a running max of its own, as the attention kernels do
// their keys: it needs no global max first, so it issues the loads of UR
// splits' (m, l) and partials together, and the split lanes' results meet
// once in shared memory.
//
// The includer declares, before including it:
//   const uint SM_D, SM_N;  head dim (a multiple of 4), invocations
//   const bool SM_Q8;       also write the output in the q8 layout (q8.glsl;
//                           SM_D a multiple of 32)
//   NEG, NEG_HALF           flash_attn.glsl's masked-score constants
//   vec4 part[]             the partial outputs [split][rows][SM_D/4]
//   vec2 part_ml[]          and their (m, l) [split][rows]
//   vec4 merged[]           the output [rows][SM_D/4]
//   q8w[], q8f[]            the q8 output views, when SM_Q8 may be true

#include "q8.glsl"

const uint SM_NC = SM_D / 4; // vec4 columns of a row
const uint SM_UR = 16;       // splits whose loads a lane issues together

shared vec4 sm_sums[SM_N];
shared vec2 sm_ml[SM_N];

// merge_rows merges rows row0 .. row0+nrows-1 of the rows (n_q × n_head)
// over nsplit splits. Every invocation of the workgroup calls it.
void merge_rows(uint row0, uint nrows, uint rows, uint nsplit, uint tid) {
    const uint items = nrows * SM_NC;
    const uint it = min(items, SM_N); // items per pass
    const uint sln = SM_N / it;       // split lanes; invocations past sln × it idle
    const uint sl = tid / it;
    for (uint p0 = 0; p0 < items; p0 += it) {
        const uint item = p0 + tid % it;
        const bool live = sl < sln && item < items;
        const uint row = row0 + item / SM_NC;
        const uint c = item % SM_NC;
        // This lane's splits sl, sl+sln, ..., UR at a time; past nsplit a
        // slot repeats split 0 (always present) and weighs nothing.
        float m = NEG;
        float l = 0.0;
        vec4 acc = vec4(0.0);
        for (uint s0 = sl; live && s0 < nsplit; s0 += sln * SM_UR) {
            vec2 e[SM_UR];
            vec4 p[SM_UR];
            [[unroll]] for (uint u = 0; u < SM_UR; u++) {
                const uint s = s0 + u * sln < nsplit ? s0 + u * sln : 0u;
                e[u] = part_ml[s * rows + row];
                p[u] = part[(s * rows + row) * SM_NC + c];
            }
            float mx = m;
            [[unroll]] for (uint u = 0; u < SM_UR; u++) {
                if (s0 + u * sln >= nsplit) {
                    e[u] = vec2(NEG, 0.0);
                }
                mx = max(mx, e[u].x);
            }
            // While every split so far is empty, mx is NEG; subtracting 0
            // instead keeps their weights exp2(NEG) = 0.
            const float mu = mx > NEG_HALF ? mx : 0.0;
            const float alpha = exp2(m - mu);
            l *= alpha;
            acc *= alpha;
            [[unroll]] for (uint u = 0; u < SM_UR; u++) {
                const float w = exp2(e[u].x - mu);
                l += w * e[u].y;
                acc += w * p[u];
            }
            m = mx;
        }
        sm_sums[tid] = acc;
        sm_ml[tid] = vec2(m, l);
        memoryBarrierShared();
        barrier();
        vec4 o = vec4(0.0);
        if (sl == 0 && item < items) {
            float mx = NEG;
            for (uint i = 0; i < sln; i++) {
                mx = max(mx, sm_ml[i * it + tid].x);
            }
            const float mu = mx > NEG_HALF ? mx : 0.0;
            float lsum = 0.0;
            for (uint i = 0; i < sln; i++) {
                const float w = exp2(sm_ml[i * it + tid].x - mu);
                lsum += w * sm_ml[i * it + tid].y;
                o += w * sm_sums[i * it + tid];
            }
            o = lsum > 0.0 ? o / lsum : vec4(0.0);
            merged[row * SM_NC + c] = o;
        }
        if (SM_Q8) {
            // A block of 32 values is 8 consecutive items of one row.
            barrier(); // every lane's reads of sm_sums are done
            if (sl == 0) {
                sm_sums[tid] = o;
            }
            memoryBarrierShared();
            barrier();
            const uint blk = p0 + 8 * tid; // first item of this lane's block
            if (8 * tid < it && blk < items) {
                vec4 v[8];
                [[unroll]] for (uint j = 0; j < 8; j++) {
                    v[j] = sm_sums[8 * tid + j];
                }
                q8_store((row0 + blk / SM_NC) * (SM_D / 32) + (blk % SM_NC) / 8, rows * (SM_D / 32), v);
            }
        }
        barrier(); // the next pass reuses sm_sums and sm_ml
    }
}
