#version 450
#extension GL_GOOGLE_include_directive : require
// STACK: several matrices in one dispatch with their rows' epilogues
// (matvec_stack.glsl), f32 activations.
#define STACK
#include "matvec.glsl"
