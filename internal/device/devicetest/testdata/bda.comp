#version 450
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
// out[i] = src[pc.first + i] + near[i] for i < pc.n (uint32 arithmetic),
// where src is read through its 64-bit device address pc.src (element
// addresses computed in 64 bits, so they may lie beyond the binding range)
// and near is binding 0, normally the same buffer through its descriptor.
// Any number of workgroups covers any n (grid-stride loop).
layout(local_size_x = 64) in;
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Word { uint v; };
layout(push_constant) uniform Push { uint64_t src; uint64_t first; uint n; } pc;
layout(std430, binding = 0) readonly buffer Near { uint near[]; };
layout(std430, binding = 1) writeonly buffer Out { uint outv[]; };
void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
        Word w = Word(pc.src + 4ul * (pc.first + uint64_t(i)));
        outv[i] = w.v + near[i];
    }
}
