#version 450
// router_parts: a prefill batch's router product in parts of K, for
// route.comp (PARTS) to sum, scale and route: parts[s][row][e] = the sum
// over split s's values k of W[e][k] · h[row][k], with h = x · g (the RMS
// norm's weight; its factor is one number a token, which route.comp
// applies) where RMS, else x.
//
// router.comp reads the 1 MB router matrix of Qwen3-30B-A3B once per token
// from the cache: 512 MB a 512-token batch, which bound it at the cache's
// bandwidth. Here a workgroup takes a tile of TT tokens × TE experts and
// stages KC values of both at a time in shared memory, so W is read once
// per TT tokens. A lane keeps a 4 × 4 block of the tile's sums in
// registers: per vec4 of K it loads four of x and four of W for 64
// multiply-adds, which keeps the stage's reads below the arithmetic. The
// tile's outputs are too few to fill a GPU by themselves (a batch of 512
// tokens over 128 experts is 16 tiles), so the grid's z cuts K into
// splits (whole chunks), each writing its own part: the parts are summed
// in a fixed order afterwards, so the logits are the same from run to run.
//
// Lane (tx, ty) of the 16 × 16 takes tokens tx, tx+16, tx+32, tx+48 and
// experts ty, ty+16, ..., so consecutive lanes read consecutive words of
// the stage. Tokens past the batch and experts past E stage zeros and
// write nothing.
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x = 256) in;
layout(constant_id = 0) const bool RMS = false;

const uint TT = 64u;     // tokens a tile
const uint TE = 64u;     // experts a tile
const uint KC4 = 8u;     // vec4s of K a chunk (32 values)
const uint LANES = 256u;

layout(binding = 0) writeonly buffer Parts { float parts[]; }; // [splits][rows][E]
layout(binding = 1) readonly buffer W { vec4 w4[]; };          // [E][K/4]
layout(binding = 2) readonly buffer X { vec4 x4[]; };          // [rows][K/4]
layout(binding = 3) readonly buffer G { vec4 g4[]; };          // [K/4], with RMS

layout(push_constant) uniform Push {
    uint rows;  // tokens
    uint E;     // experts
    uint K4;    // vec4s per row of W and x
    uint span4; // vec4s of K a split takes: whole chunks
} pc;

shared vec4 xs[KC4][TT]; // h, chunk-major: [k][token]
shared vec4 ws[KC4][TE]; // W, [k][expert]

void main() {
    const uint lane = gl_LocalInvocationIndex;
    const uint tx = lane % 16u, ty = lane / 16u;
    const uint t0 = gl_WorkGroupID.x * TT, e0 = gl_WorkGroupID.y * TE;
    const uint kb = gl_WorkGroupID.z * pc.span4;
    const uint ke = min(pc.K4, kb + pc.span4);

    float acc[4][4];
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            acc[i][j] = 0.0;
        }
    }
    for (uint k0 = kb; k0 < ke; k0 += KC4) {
        // Stage the chunk: TT·KC4 vec4s of h and TE·KC4 of W, two of each
        // a lane, a row's KC4 words by neighbouring lanes.
        [[unroll]] for (uint r = 0u; r < TT * KC4 / LANES; r++) {
            const uint it = lane + r * LANES;
            const uint t = it / KC4, k = it % KC4;
            vec4 v = vec4(0.0);
            if (t0 + t < pc.rows && k0 + k < ke) {
                v = x4[(t0 + t) * pc.K4 + k0 + k];
                if (RMS) {
                    v *= g4[k0 + k];
                }
            }
            xs[k][t] = v;
        }
        [[unroll]] for (uint r = 0u; r < TE * KC4 / LANES; r++) {
            const uint it = lane + r * LANES;
            const uint e = it / KC4, k = it % KC4;
            vec4 v = vec4(0.0);
            if (e0 + e < pc.E && k0 + k < ke) {
                v = w4[(e0 + e) * pc.K4 + k0 + k];
            }
            ws[k][e] = v;
        }
        barrier(); // the chunk is staged
        [[unroll]] for (uint k = 0u; k < KC4; k++) {
            vec4 a[4], b[4];
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                a[i] = xs[k][tx + 16u * i];
                b[i] = ws[k][ty + 16u * i];
            }
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                [[unroll]] for (uint j = 0u; j < 4u; j++) {
                    acc[i][j] += dot(a[i], b[j]);
                }
            }
        }
        barrier(); // the chunk is read
    }
    const uint base = gl_WorkGroupID.z * pc.rows * pc.E;
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        const uint t = t0 + tx + 16u * i;
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            const uint e = e0 + ty + 16u * j;
            if (t < pc.rows && e < pc.E) {
                parts[base + t * pc.E + e] = acc[i][j];
            }
        }
    }
}
