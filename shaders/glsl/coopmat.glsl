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
// and f32 accumulator-shaped fragments constant along a row (R: a value
// per row m), loaded from an array of vec4 (off counted in vec4s) by a load
// of stride 0:
//   CM_DECL_R(name, n)
//   CM_LOAD_R4(r, arr, off)           r[m][n] = component m of the floats from arr[off] on
//   CM_MUL_R(c, r)                    c[m][n] *= r[m][n], element by element
// Every invocation of a subgroup must reach them together, with the same
// arguments; loads and stores of shared memory need the usual barriers.
// CM_SUBGROUP is the subgroup's index in the workgroup. CM_UNROLL unrolls
// a loop over an array of fragments on the device, where the fragments
// must be indexed by constants, and not in the emulation, whose fragments
// are plain arrays that lavapipe builds far more slowly unrolled.
//
// The emulation gives every invocation of a (virtual) subgroup of SGV
// consecutive invocations the whole fragment; they compute identical
// values, and a store splits the elements among them so that no two
// invocations write one location.
//
// With COOP_INT8 defined, integer fragments as well (CM_K a multiple of
// 16): an A (CM_M x CM_K, int8), a B (CM_K x CM_N, int8) and an
// accumulator (CM_M x CM_N, int32), read from arrays of uvec4 (16 bytes
// each, offsets and strides counted in uvec4s):
//   CM_DECL_IA(name, n), CM_DECL_IB(name, n), CM_DECL_IC(name, n)
//   CM_IZERO(c)                       c = 0
//   CM_LOAD_IA16(a, arr, off, stride)  a[m][k] = byte k of the bytes from arr[off + m*stride] on
//   CM_LOAD_IBT16(b, arr, off, stride) b[k][n] = byte k of the bytes from arr[off + n*stride] on
//   CM_IMULADD(c, a, b)               c += a * b, exact in 32 bits
// and f32 accumulator-shaped fragments that are constant along a column
// (S: a value per column n), loaded like R:
//   CM_DECL_S(name, n)
//   CM_LOAD_S4(s, arr, off)           s[m][n] = component n of the floats from arr[off] on
//   CM_ADD_SCALED(c, p, r, s)         c += float(p) * r * s, element by element
//   CM_ADD_OUTER(c, r, s)             c += r * s, element by element
// The element order of a fragment is the implementation's, so a value
// that depends on an element's row or column reaches it only through a
// fragment of the same type loaded so that it holds that value at that
// row or column: the R and S loads. (The emulation stores R and S as their
// CM_M or CM_N distinct values.)

#ifdef COOPMAT_EMULATE

#define CM_UNROLL
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
#define CM_DECL_R(name, n) float name[n][CM_M]
#define CM_LOAD_R4(r, arr, off)                                 \
    for (uint cm_m = 0u; cm_m < CM_M; cm_m++) {                 \
        (r)[cm_m] = arr[(off) + cm_m / 4u][cm_m % 4u];          \
    }
#define CM_MUL_R(c, r)                                          \
    for (uint cm_e = 0u; cm_e < CM_M * CM_N; cm_e++) {          \
        (c)[cm_e] *= (r)[cm_e / CM_N];                          \
    }

#ifdef COOP_INT8
// Integer fragments hold their bytes packed four to a word: A by rows, B by
// columns (CM_KW words of k each).
#define CM_KW (CM_K / 4u)
#define CM_DECL_IA(name, n) uint name[n][CM_M * CM_KW]
#define CM_DECL_IB(name, n) uint name[n][CM_N * CM_KW]
#define CM_DECL_IC(name, n) int name[n][CM_M * CM_N]
#define CM_DECL_S(name, n) float name[n][CM_N]

// cm_sdot4: the sum of the products of the four signed bytes of a and b.
int cm_sdot4(uint a, uint b) {
    ivec4 x = ivec4(uvec4(a << 24, a << 16, a << 8, a)) >> 24;
    ivec4 y = ivec4(uvec4(b << 24, b << 16, b << 8, b)) >> 24;
    return x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
}

#define CM_IZERO(c)                                             \
    for (uint cm_e = 0u; cm_e < CM_M * CM_N; cm_e++) {          \
        (c)[cm_e] = 0;                                          \
    }
// CM_KW is a multiple of 4, so word w of a row is component w % 4 of
// vector w / 4.
#define CM_LOAD_IA16(a, arr, off, stride)                       \
    for (uint cm_e = 0u; cm_e < CM_M * CM_KW; cm_e++) {         \
        (a)[cm_e] = arr[(off) + (cm_e / CM_KW) * (stride) + (cm_e % CM_KW) / 4u][cm_e % 4u]; \
    }
#define CM_LOAD_IBT16(b, arr, off, stride)                      \
    for (uint cm_e = 0u; cm_e < CM_N * CM_KW; cm_e++) {         \
        (b)[cm_e] = arr[(off) + (cm_e / CM_KW) * (stride) + (cm_e % CM_KW) / 4u][cm_e % 4u]; \
    }
#define CM_IMULADD(c, a, b)                                     \
    for (uint cm_m = 0u; cm_m < CM_M; cm_m++) {                 \
        for (uint cm_n = 0u; cm_n < CM_N; cm_n++) {             \
            int cm_s = (c)[cm_m * CM_N + cm_n];                 \
            for (uint cm_w = 0u; cm_w < CM_KW; cm_w++) {        \
                cm_s += cm_sdot4((a)[cm_m * CM_KW + cm_w], (b)[cm_n * CM_KW + cm_w]); \
            }                                                   \
            (c)[cm_m * CM_N + cm_n] = cm_s;                     \
        }                                                       \
    }
#define CM_LOAD_S4(s, arr, off)                                 \
    for (uint cm_n = 0u; cm_n < CM_N; cm_n++) {                 \
        (s)[cm_n] = arr[(off) + cm_n / 4u][cm_n % 4u];          \
    }
#define CM_ADD_SCALED(c, p, r, s)                               \
    for (uint cm_e = 0u; cm_e < CM_M * CM_N; cm_e++) {          \
        (c)[cm_e] += float((p)[cm_e]) * (r)[cm_e / CM_N] * (s)[cm_e % CM_N]; \
    }
#define CM_ADD_OUTER(c, r, s)                                   \
    for (uint cm_e = 0u; cm_e < CM_M * CM_N; cm_e++) {          \
        (c)[cm_e] += (r)[cm_e / CM_N] * (s)[cm_e % CM_N];       \
    }
#endif

#else

#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require

#define CM_UNROLL [[unroll]]
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
#define CM_DECL_R(name, n) CM_C_T name[n]
// Stride 0: every column (R) or every row (S) is the same run of values.
#define CM_LOAD_R4(r, arr, off) coopMatLoad(r, arr, off, 0u, gl_CooperativeMatrixLayoutColumnMajor)
// Arithmetic on two fragments of one type is element by element.
#define CM_MUL_R(c, r) c = c * r

#ifdef COOP_INT8
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require

#define CM_IA_T coopmat<int8_t, gl_ScopeSubgroup, CM_M, CM_K, gl_MatrixUseA>
#define CM_IB_T coopmat<int8_t, gl_ScopeSubgroup, CM_K, CM_N, gl_MatrixUseB>
#define CM_IC_T coopmat<int32_t, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator>
#define CM_DECL_IA(name, n) CM_IA_T name[n]
#define CM_DECL_IB(name, n) CM_IB_T name[n]
#define CM_DECL_IC(name, n) CM_IC_T name[n]
#define CM_DECL_S(name, n) CM_C_T name[n]

#define CM_IZERO(c) c = CM_IC_T(0)
#define CM_LOAD_IA16(a, arr, off, stride) coopMatLoad(a, arr, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define CM_LOAD_IBT16(b, arr, off, stride) coopMatLoad(b, arr, off, stride, gl_CooperativeMatrixLayoutColumnMajor)
// The component types' signedness makes glslang mark the product signed.
#define CM_IMULADD(c, a, b) c = coopMatMulAdd(a, b, c)
#define CM_LOAD_S4(s, arr, off) coopMatLoad(s, arr, off, 0u, gl_CooperativeMatrixLayoutRowMajor)
// Arithmetic on two fragments of one type is element by element; the
// conversion keeps each element where it is.
#define CM_ADD_SCALED(c, p, r, s) c = c + CM_C_T(p) * r * s
#define CM_ADD_OUTER(c, r, s) c = c + r * s
#endif

#endif
