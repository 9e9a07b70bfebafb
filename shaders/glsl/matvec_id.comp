#version 450
#extension GL_GOOGLE_include_directive : require
// MOE_ID: the product of each slot's chosen expert (matvec_id.glsl), f32
// activations.
#define MOE_ID
#include "matvec.glsl"
