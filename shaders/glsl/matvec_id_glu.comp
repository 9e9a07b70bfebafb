#version 450
#extension GL_GOOGLE_include_directive : require
// MOE_ID with MOE_GLU: each slot's chosen experts' gate and up products
// and their gated activation in one dispatch (matvec_id.glsl), f32
// activations.
#define MOE_ID
#define MOE_GLU
#include "matvec.glsl"
