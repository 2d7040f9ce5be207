#version 450
// Finite but long-running: each invocation iterates pc.iters times.
layout(local_size_x = 64) in;
layout(push_constant) uniform Push { uint iters; } pc;
layout(std430, binding = 0) buffer X { uint x[]; };
void main() {
    uint acc = gl_GlobalInvocationID.x;
    for (uint k = 0; k < pc.iters; k++) acc = acc * 1664525u + 1013904223u;
    x[gl_GlobalInvocationID.x] = acc;
}
