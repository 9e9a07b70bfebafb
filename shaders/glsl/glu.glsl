// glu.glsl: the activations of gated FFNs, out = act(gate) * up, shared by
// eltwise.comp and quantize_q8.comp (which pick one with a specialization
// constant). Both are written as x / (1 + e^-y): for very negative y the
// exp overflows to +inf and the quotient is the correct -0, so neither form
// can produce inf/inf or a NaN.

const uint GLU_SILU = 0u; // SwiGLU: silu(x) = x / (1 + e^-x)
const uint GLU_GELU = 1u; // GeGLU: ggml_gelu's tanh form

// SQRT_2_OVER_PI and GELU_COEF are ggml's constants of the tanh form.
const float SQRT_2_OVER_PI = 0.79788456080286535588;
const float GELU_COEF = 0.044715;

// glu_act is act(x): silu, or gelu's 0.5*x*(1 + tanh(u)) with
// u = sqrt(2/pi)*(x + 0.044715*x^3). Since 1 + tanh(u) = 2 / (1 + e^-2u),
// that is x / (1 + e^-2u): no cancellation where tanh(u) nears -1 (the
// negative tail, which the plain form rounds to 0 early), and for |x| past
// f32's cube range u is +-inf and the quotient x or -0, as gelu's limits.
vec4 glu_act(uint act, vec4 x) {
    vec4 y = x;
    if (act == GLU_GELU) {
        y = (2.0 * SQRT_2_OVER_PI) * x * (1.0 + GELU_COEF * x * x);
    }
    return x / (1.0 + exp(-y));
}
