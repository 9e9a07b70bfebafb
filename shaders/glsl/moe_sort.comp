#version 450
// moe_sort: the counting sort of a prefill batch's (token, slot) pairs by
// expert, the first step of the prefill packed by expert (docs/KERNELS.md).
// ids holds an expert per pair (route's output, exact f32 integers; one
// out of range is clamped to the last expert, as matvec_id does). It
// writes out[0..E] = each expert's first position in the sorted order and
// the total (the prefix sum of the counts), then out[E+1+j] = the pair
// index at sorted position j: each expert's pairs together, in the order
// the scatter's atomics gave them (kernels.PackByExpert's runs, within
// which the host puts them in ascending order). After them, at T = E+1+pairs,
// comes the tile list of the gathered products (matmul_cols.glsl): out[T]
// = the number of tiles, then 3 words a tile (expert, first sorted
// position, pairs), each expert's run cut into tiles of BN pairs, the last
// one partial: PackByExpert's naive cut at height BN, in expert order. The
// products' grids are sized by the most tiles a batch can make
// (kernels.MoETiles), and workgroups past out[T] return at once.
//
// One workgroup does the whole sort, so every step is ordered by barriers
// alone (shared memory, no device-scope release/acquire needed): counts
// by shared atomics, the prefix sum by lane 0, then the scatter, each pair
// taking the next place of its expert's run with a shared atomic. The
// order of the pairs within a run then varies from run to run; nothing
// computed from it does, since the gathered products give each column
// (pair) a sum over K alone, the same arithmetic in any column, and write
// it to the pair's own row. (A scatter that ranked each pair among the
// lower lanes of its round, for an order fixed by the pair indices, took
// most of this kernel's 58 µs on an H100: docs/BENCHMARKS.md.) Loop bounds
// are uniform, so every barrier is in uniform control flow. The tiles are
// written by the lane of their expert, from the counts and offsets the
// prefix sum left; they depend on the counts alone.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;
layout(constant_id = 1) const uint MAXE = 1024; // most experts (shared capacity)

layout(binding = 0) readonly buffer Ids { float ids[]; };
layout(binding = 1) writeonly buffer Out { uint outv[]; };

layout(push_constant) uniform Push {
    uint pairs; // tokens * slots
    uint E;     // experts, <= MAXE
    uint BN;    // pairs per tile, >= 1
} pc;

shared uint cnt[MAXE];
shared uint cur[MAXE];
shared uint tile0[MAXE]; // expert e's first tile

uint expertOf(uint i) { return min(uint(max(ids[i], 0.0)), pc.E - 1u); }

void main() {
    uint l = gl_LocalInvocationID.x;
    for (uint e = l; e < pc.E; e += WG) {
        cnt[e] = 0u;
    }
    barrier();
    for (uint i = l; i < pc.pairs; i += WG) {
        atomicAdd(cnt[expertOf(i)], 1u);
    }
    barrier();
    uint T = pc.E + 1u + pc.pairs;
    uint bn = max(pc.BN, 1u); // a bad height must not loop forever
    if (l == 0u) {
        uint s = 0u, t = 0u;
        for (uint e = 0u; e < pc.E; e++) {
            cur[e] = s;
            outv[e] = s;
            s += cnt[e];
            tile0[e] = t;
            t += (cnt[e] + bn - 1u) / bn;
        }
        outv[pc.E] = s;
        outv[T] = t;
    }
    barrier();
    for (uint e = l; e < pc.E; e += WG) {
        uint t = T + 1u + 3u * tile0[e];
        for (uint j = 0u; j < cnt[e]; j += bn) {
            outv[t] = e;
            outv[t + 1u] = cur[e] + j;
            outv[t + 2u] = min(bn, cnt[e] - j);
            t += 3u;
        }
    }
    barrier(); // the tiles have read cur[e] as expert e's offset
    for (uint i = l; i < pc.pairs; i += WG) {
        outv[pc.E + 1u + atomicAdd(cur[expertOf(i)], 1u)] = i;
    }
}
