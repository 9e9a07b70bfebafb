// coopmat.glsl: the cooperative-matrix operations the matrix-core kernels
// use, as macros over VK_KHR_cooperative_matrix (GL_KHR_cooperative_matrix)
// or, with COOPMAT_EMULATE defined, over plain per-invocation arrays, so
// that the same kernel source runs on devices without the extension
// (lavapipe in CI) and is checked there against the CPU reference.
//
// The includer declares the fragment shape as constants CM_M, CM_N, CM_K
// (specialization constants: the device reports which shapes it offers) and
// SGV, the invocations per subgroup (emulation only: the real kernel runs
// with full subgroups of the size it was created with).
//
// A fragment is an A (CM_M x CM_K, f16), a B (CM_K x CM_N, f16) or an
// accumulator C (CM_M x CM_N, f32), owned by one subgroup:
//   CM_DECL_A(name, n), CM_DECL_B(name, n), CM_DECL_C(name, n)
//                                     declare n fragments
//   CM_ZERO(c)                        c = 0
//   CM_LOAD_A(a, arr, off, stride)    a[m][k] = arr[off + m*stride + k]
//   CM_LOAD_BT(b, arr, off, stride)   b[k][n] = arr[off + n*stride + k]
//   CM_LOAD_B(b, arr, off, stride)    b[k][n] = arr[off + k*stride + n]
//   CM_MULADD(c, a, b)                c += a * b, products and sums in f32
//   CM_STORE_CT(c, arr, off, stride)  arr[off + n*stride + m] = c[m][n]
//   CM_LOAD_A4, CM_LOAD_BT4           CM_LOAD_A and CM_LOAD_BT from an array
//                                     of f16vec4, off and stride counted in
//                                     vec4s (so stores to it are 8 bytes wide)
// Every invocation of a subgroup must reach them together, with the same
// arguments; loads and stores of shared memory need the usual barriers.
// CM_SUBGROUP is the subgroup's index in the workgroup.
//
// The emulation gives every invocation of a (virtual) subgroup of SGV
// consecutive invocations the whole fragment; they compute identical
// values, and a store splits the elements among them so that no two
// invocations write one location.

#ifdef COOPMAT_EMULATE

#define CM_DECL_A(name, n) float16_t name[n][CM_M * CM_K]
#define CM_DECL_B(name, n) float16_t name[n][CM_K * CM_N]
#define CM_DECL_C(name, n) float name[n][CM_M * CM_N]
#define CM_SUBGROUP (gl_LocalInvocationIndex / SGV)

#define CM_ZERO(c)                                              \
    for (uint cm_e = 0u; cm_e < CM_M * CM_N; cm_e++) {          \
        (c)[cm_e] = 0.0;                                        \
    }
#define CM_LOAD_A(a, arr, off, stride)                          \
    for (uint cm_e = 0u; cm_e < CM_M * CM_K; cm_e++) {          \
        (a)[cm_e] = arr[(off) + (cm_e / CM_K) * (stride) + cm_e % CM_K]; \
    }
#define CM_LOAD_BT(b, arr, off, stride)                         \
    for (uint cm_e = 0u; cm_e < CM_K * CM_N; cm_e++) {          \
        (b)[cm_e] = arr[(off) + (cm_e % CM_N) * (stride) + cm_e / CM_N]; \
    }
#define CM_LOAD_B(b, arr, off, stride)                          \
    for (uint cm_e = 0u; cm_e < CM_K * CM_N; cm_e++) {          \
        (b)[cm_e] = arr[(off) + (cm_e / CM_N) * (stride) + cm_e % CM_N]; \
    }
#define CM_LOAD_A4(a, arr, off, stride)                         \
    for (uint cm_e = 0u; cm_e < CM_M * CM_K; cm_e++) {          \
        uint cm_i = 4u * ((off) + (cm_e / CM_K) * (stride)) + cm_e % CM_K; \
        (a)[cm_e] = arr[cm_i >> 2][cm_i & 3u];                  \
    }
#define CM_LOAD_BT4(b, arr, off, stride)                        \
    for (uint cm_e = 0u; cm_e < CM_K * CM_N; cm_e++) {          \
        uint cm_i = 4u * ((off) + (cm_e % CM_N) * (stride)) + cm_e / CM_N; \
        (b)[cm_e] = arr[cm_i >> 2][cm_i & 3u];                  \
    }
#define CM_MULADD(c, a, b)                                      \
    for (uint cm_m = 0u; cm_m < CM_M; cm_m++) {                 \
        for (uint cm_n = 0u; cm_n < CM_N; cm_n++) {             \
            float cm_s = (c)[cm_m * CM_N + cm_n];               \
            for (uint cm_k = 0u; cm_k < CM_K; cm_k++) {         \
                cm_s += float((a)[cm_m * CM_K + cm_k]) * float((b)[cm_k * CM_N + cm_n]); \
            }                                                   \
            (c)[cm_m * CM_N + cm_n] = cm_s;                     \
        }                                                       \
    }
#define CM_STORE_CT(c, arr, off, stride)                        \
    for (uint cm_e = gl_LocalInvocationIndex % SGV; cm_e < CM_M * CM_N; cm_e += SGV) { \
        arr[(off) + (cm_e % CM_N) * (stride) + cm_e / CM_N] = (c)[cm_e]; \
    }

#else

#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require

#define CM_A_T coopmat<float16_t, gl_ScopeSubgroup, CM_M, CM_K, gl_MatrixUseA>
#define CM_B_T coopmat<float16_t, gl_ScopeSubgroup, CM_K, CM_N, gl_MatrixUseB>
#define CM_C_T coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator>
#define CM_DECL_A(name, n) CM_A_T name[n]
#define CM_DECL_B(name, n) CM_B_T name[n]
#define CM_DECL_C(name, n) CM_C_T name[n]
#define CM_SUBGROUP gl_SubgroupID

#define CM_ZERO(c) c = CM_C_T(0.0)
#define CM_LOAD_A(a, arr, off, stride) coopMatLoad(a, arr, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define CM_LOAD_BT(b, arr, off, stride) coopMatLoad(b, arr, off, stride, gl_CooperativeMatrixLayoutColumnMajor)
#define CM_LOAD_B(b, arr, off, stride) coopMatLoad(b, arr, off, stride, gl_CooperativeMatrixLayoutRowMajor)
// An array of vectors is read as consecutive components, its offset and
// stride counted in its own elements.
#define CM_LOAD_A4(a, arr, off, stride) CM_LOAD_A(a, arr, off, stride)
#define CM_LOAD_BT4(b, arr, off, stride) CM_LOAD_BT(b, arr, off, stride)
#define CM_MULADD(c, a, b) c = coopMatMulAdd(a, b, c)
#define CM_STORE_CT(c, arr, off, stride) coopMatStore(c, arr, off, stride, gl_CooperativeMatrixLayoutColumnMajor)

#endif
