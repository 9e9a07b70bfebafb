#version 450
#extension GL_GOOGLE_include_directive : require
// MOE_ID with MOE_SUM: each token's chosen experts' products mixed by the
// router's weights into the residual in one dispatch (matvec_id.glsl),
// f32 activations.
#define MOE_ID
#define MOE_SUM
#include "matvec.glsl"
