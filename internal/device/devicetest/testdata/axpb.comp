#version 450
// In place: x[i] = x[i]*pc.mul + pc.add for i < pc.n (dependent chains need barriers).
layout(local_size_x = 64) in;
layout(push_constant) uniform Push { uint n; float mul; float add; } pc;
layout(std430, binding = 0) buffer X { float x[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n) x[i] = x[i] * pc.mul + pc.add;
}
