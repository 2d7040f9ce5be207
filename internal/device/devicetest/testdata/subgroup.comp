#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// out[0] = gl_SubgroupSize; out[1+i] = subgroupAdd(1) for every invocation i.
layout(local_size_x = 64) in;
layout(std430, binding = 0) writeonly buffer O { uint o[]; };
void main() {
    uint i = gl_LocalInvocationIndex;
    uint s = subgroupAdd(1u);
    if (i == 0) o[0] = gl_SubgroupSize;
    o[1 + i] = s;
}
