// reduce.glsl: workgroup-wide sum / max of RED_N values per invocation.
//
// The includer defines, before including this file:
//   RED_N  number of values reduced at once (a constant or spec-constant expression)
//   NSG    the most subgroups a workgroup can hold (workgroup size divided by
//          the device's minimum subgroup size, set by the Go side)
// and enables GL_KHR_shader_subgroup_arithmetic.
//
// Each subgroup reduces in registers (subgroupAdd / subgroupMax). The
// subgroup size is a driver choice (8 on lavapipe, 32 on NVIDIA, 32 or 64 on
// AMD), so the shader asks at run time: when the workgroup is wider than one
// subgroup, the per-subgroup results meet in shared memory.
// Call from uniform control flow only. The values go in and the results come
// back in red_v (a private array rather than a parameter: arrays sized by
// specialization constants cannot be passed by value through glslc -O);
// every invocation gets the results.

float red_v[RED_N];
shared float red_sh[RED_N * NSG];

void wg_reduce(bool useMax) {
    for (uint i = 0u; i < RED_N; i++) {
        red_v[i] = useMax ? subgroupMax(red_v[i]) : subgroupAdd(red_v[i]);
    }
    if (gl_NumSubgroups == 1u) {
        return;
    }
    barrier(); // a previous call's readers are done with red_sh
    if (subgroupElect()) {
        for (uint i = 0u; i < RED_N; i++) {
            red_sh[i * NSG + gl_SubgroupID] = red_v[i];
        }
    }
    barrier();
    // At most NSG subgroups by the device's limits; the bound is the array's
    // all the same, whatever a driver reports.
    const uint nsg = min(gl_NumSubgroups, NSG);
    for (uint i = 0u; i < RED_N; i++) {
        float r = red_sh[i * NSG];
        for (uint s = 1u; s < nsg; s++) {
            float o = red_sh[i * NSG + s];
            r = useMax ? max(r, o) : r + o;
        }
        red_v[i] = r;
    }
}
