#version 450
// c[i] = a[i] + SCALE*b[i] + pc.bias for i < pc.n.
// local_size_x is specialization constant 0, SCALE is constant 1.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const float SCALE = 1.0;
layout(push_constant) uniform Push { uint n; float bias; } pc;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer C { float c[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n) c[i] = a[i] + SCALE * b[i] + pc.bias;
}
