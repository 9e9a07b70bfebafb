// route.glsl: a mixture of experts' top-k over one token's router logits,
// run by a whole workgroup: p = softmax(logits[row]) over E experts; ids[row]
// gets the k experts of highest p in descending order (ties to the lower
// index) as exact f32 integers, weights[row] their probabilities, divided by
// their sum (clamped below at 6.103515625e-5, llama.cpp's guard) when NORM.
// Included by route.comp (a dispatch of its own) and router.comp (the
// router product's last workgroup).
//
// Its cost is its chain of barriers. Lane l holds the probabilities of
// experts l, l+WG, … in registers; each reduction (the max, the sum, each
// round's best (p, index) pair) is a subgroup operation and then one
// workgroup barrier to combine the subgroups' results, which every lane
// reads. A round marks its expert taken with p = -1, below every
// probability, in the register of the lane that holds it. The rounds'
// partial results alternate between two shared arrays, so a round's writes
// never meet the previous round's reads and one barrier a round suffices.
//
// The includer declares WG, MAXE and NORM, the buffers logits[], ids[] and
// weights[], and pc.E and pc.k.

const uint PER = (MAXE + WG - 1u) / WG; // experts a lane holds, at most

shared float smax[WG]; // per subgroup (at most WG of them)
shared float ssum[WG];
shared float rv[2][WG];
shared uint ri[2][WG];
shared float chosen[MAXE]; // lane 0's alone

// better says whether (va, ia) ranks above (vb, ib).
bool better(float va, uint ia, float vb, uint ib) { return va > vb || (va == vb && ia < ib); }

// route_row routes token row; every invocation of the workgroup calls it.
void route_row(uint row) {
    uint lane = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID, nsg = gl_NumSubgroups;
    uint base = row * pc.E;

    float p[PER];
    float m = uintBitsToFloat(0xFF800000u); // -inf
    [[unroll]] for (uint j = 0u; j < PER; j++) {
        uint e = lane + j * WG;
        p[j] = e < pc.E ? logits[base + e] : m;
        m = max(m, p[j]);
    }
    m = subgroupMax(m);
    if (subgroupElect()) {
        smax[sg] = m;
    }
    barrier();
    for (uint i = 0u; i < nsg; i++) {
        m = max(m, smax[i]);
    }

    float sum = 0.0;
    [[unroll]] for (uint j = 0u; j < PER; j++) {
        uint e = lane + j * WG;
        p[j] = e < pc.E ? exp(p[j] - m) : 0.0;
        sum += p[j];
    }
    sum = subgroupAdd(sum);
    if (subgroupElect()) {
        ssum[sg] = sum;
    }
    barrier();
    sum = 0.0;
    for (uint i = 0u; i < nsg; i++) {
        sum += ssum[i];
    }
    float inv = 1.0 / sum;
    [[unroll]] for (uint j = 0u; j < PER; j++) {
        // Past E: below a taken expert's -1, so never chosen.
        p[j] = lane + j * WG < pc.E ? p[j] * inv : -2.0;
    }

    for (uint r = 0u; r < pc.k; r++) {
        uint b = r & 1u;
        float bv = -3.0;
        uint bi = 0xFFFFFFFFu;
        [[unroll]] for (uint j = 0u; j < PER; j++) {
            if (p[j] > bv) { // ascending e: ties keep the lower index
                bv = p[j];
                bi = lane + j * WG;
            }
        }
        float mv = subgroupMax(bv);
        uint mi = subgroupMin(bv == mv ? bi : 0xFFFFFFFFu);
        if (subgroupElect()) {
            rv[b][sg] = mv;
            ri[b][sg] = mi;
        }
        barrier();
        bv = rv[b][0];
        bi = ri[b][0];
        for (uint i = 1u; i < nsg; i++) {
            if (better(rv[b][i], ri[b][i], bv, bi)) {
                bv = rv[b][i];
                bi = ri[b][i];
            }
        }
        [[unroll]] for (uint j = 0u; j < PER; j++) {
            if (lane + j * WG == bi) {
                p[j] = -1.0;
            }
        }
        if (lane == 0u) {
            chosen[r] = bv;
            ids[row * pc.k + r] = float(bi);
        }
    }

    if (lane == 0u) {
        float s = 0.0;
        for (uint r = 0u; r < pc.k; r++) {
            s += chosen[r];
        }
        float d = NORM ? max(s, 6.103515625e-5) : 1.0;
        for (uint r = 0u; r < pc.k; r++) {
            weights[row * pc.k + r] = NORM ? chosen[r] / d : chosen[r];
        }
    }
}
