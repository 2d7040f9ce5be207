#version 450
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
// y[i] = float(x[i] * 2.0hf): exercises 16-bit storage and float16 arithmetic.
layout(local_size_x = 64) in;
layout(push_constant) uniform Push { uint n; } pc;
layout(std430, binding = 0) readonly buffer X { float16_t x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n) y[i] = float(x[i] * float16_t(2.0));
}
