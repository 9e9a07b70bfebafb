#version 450
// moe_sort: the counting sort of a prefill batch's (token, slot) pairs by
// expert, the first step of the prefill packed by expert (docs/KERNELS.md).
// ids holds an expert per pair (route's output, exact f32 integers; one
// out of range is clamped to the last expert, as matvec_id does). It
// writes out[0..E] = each expert's first position in the sorted order and
// the total (the prefix sum of the counts), then out[E+1+j] = the pair
// index at sorted position j, pairs of one expert in ascending order, as
// kernels.PackByExpert does on the host. After them, at T = E+1+pairs,
// comes the tile list of the gathered products (matmul_cols.glsl): out[T]
// = the number of tiles, then 3 words a tile (expert, first sorted
// position, pairs), each expert's run cut into tiles of BN pairs, the last
// one partial: PackByExpert's naive cut at height BN, in expert order. The
// products' grids are sized by the most tiles a batch can make
// (kernels.MoETiles), and workgroups past out[T] return at once.
//
// One workgroup does the whole sort, so every step is ordered by barriers
// alone (shared memory, no device-scope release/acquire needed): counts
// by shared atomics, the prefix sum by lane 0, then the scatter in rounds
// of WG pairs, a pair's rank within its round being the number of lower
// lanes of the round with the same expert. Loop bounds are uniform, so
// every barrier is in uniform control flow. The tiles are written by the
// lane of their expert, from the counts and offsets the prefix sum left.

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
shared uint rid[WG];

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
    // cur[e] is still expert e's offset: the scatter below moves it on only
    // after two more barriers, which every lane reaches after this loop.
    for (uint e = l; e < pc.E; e += WG) {
        uint t = T + 1u + 3u * tile0[e];
        for (uint j = 0u; j < cnt[e]; j += bn) {
            outv[t] = e;
            outv[t + 1u] = cur[e] + j;
            outv[t + 2u] = min(bn, cnt[e] - j);
            t += 3u;
        }
    }
    for (uint base = 0u; base < pc.pairs; base += WG) {
        uint i = base + l;
        uint e = i < pc.pairs ? expertOf(i) : 0xffffffffu;
        rid[l] = e;
        barrier();
        if (i < pc.pairs) {
            uint rank = 0u;
            for (uint j = 0u; j < l; j++) {
                rank += rid[j] == e ? 1u : 0u;
            }
            outv[pc.E + 1u + cur[e] + rank] = i;
        }
        // Every lane has read cur before any lane moves it on.
        barrier();
        if (i < pc.pairs) {
            atomicAdd(cur[e], 1u);
        }
        barrier();
    }
}
