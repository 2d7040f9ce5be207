#version 450
// decode: attention of a few queries per sequence over a KV cache
// (decoding), split across workgroups along the cache (flash-decoding).
//
// Bindings (set 0):
//   0 Q    [B,Nq,Hq,D]      STYPE, readonly  (pc.q_*)
//   1 K    cache            STYPE, readonly  (pc.k_*, paged: kv_params.glsl)
//   2 V    cache            STYPE, readonly  (pc.v_*)
//   3 O    [B,Nq,Hq,DV]     STYPE, written   (pc.o_*; splits = 1 only)
//   4 LSE  [B,Hq,Nq]        float32, written (splits = 1 only)
//   5 META uint32: lengths [B], then the page table [B, max_pages]
//   6 PART float32, written when splits > 1: per split, the partial O
//          [splits,B,Hq,Nq,DV] (normalised by its own sum) followed by the
//          partial log2-sum-exp [splits,B,Hq,Nq] (−inf: the split saw no
//          row), which decode_combine merges.
// Spec constants: 0 WG, 1 D, 2 DV, 3 BR (rows per workgroup), 5 SUBGROUP
//   (4 BC unused), 7 KVEC: 1 reads each cache K row in 16-byte units
//   (the host sets it when D and K's strides are multiples of 16 bytes),
//   0 element by element. WG is a multiple of SUBGROUP; full subgroups.
// Grid: (splits, Hkv·ceil(group·Nq/BR), B): workgroup (x, y, z) computes
//   split x (cache rows x·split_keys … of sequence z) for BR rows of the
//   group·Nq rows that read KV head y / ceil(group·Nq/BR) (GQA packing:
//   row r is query r / group of head kvh·group + r mod group, so the heads
//   that share a KV head read each cache row once per workgroup).
//
// Thread layout: NSG = WG/SUBGROUP subgroups, each an independent stream
// of SUBGROUP cache rows at a time (rows base … base+SUBGROUP−1, base
// stepping by WG): lane c scores cache row base+c against the BR query
// rows (Q staged in shared memory, pre-scaled by scale·log2 e), the
// subgroup keeps its own online softmax (m by subgroupMax, l per lane),
// hands P to its lanes through its own slice of shared memory (subgroup
// barriers only), and lane c accumulates output columns c, c+SUBGROUP, …
// of O += P·V. At the end the subgroups' (m, l, O) are merged one by one
// through shared memory.
//
// Shared memory (bytes): 4·(BR·4·ceil(D/4) + NSG·SUBGROUP·BR + BR·(DV+2))
// = shaders.DecodeSharedBytes.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "params.glsl"
#include "kv_params.glsl"

OPERAND(0, 0, QBuf, q, readonly)
OPERAND_V(1, 1, KBuf, k, readonly)
OPERAND(2, 2, VBuf, v, readonly)
OPERAND(3, 3, OBuf, o, writeonly)
layout(std430, binding = 4) writeonly buffer LBuf { float lse_buf[]; };
layout(std430, binding = 5) readonly buffer MBuf { uint meta[]; };
layout(std430, binding = 6) writeonly buffer PBuf { float part[]; };

layout(constant_id = 7) const uint KVEC = 0;

const uint NSG = WG / SUBGROUP;
const uint DVN = (DV + SUBGROUP - 1u) / SUBGROUP;
const uint D4 = (D + 3u) / 4u;   // Q row in vec4 units (zero-padded)
const uint EPV = 16u / STYPE_BYTES; // elements per 16-byte unit

// unpack_unit widens the EPV elements of a 16-byte unit (exactly).
void unpack_unit(uvec4 w, out float f[EPV]) {
	[[unroll]] for (uint i = 0u; i < 4u; ++i) {
#if defined(STORAGE_F16)
		vec2 h = unpackHalf2x16(w[i]);
		f[2u * i] = h.x;
		f[2u * i + 1u] = h.y;
#elif defined(STORAGE_BF16)
		f[2u * i] = uintBitsToFloat(w[i] << 16);
		f[2u * i + 1u] = uintBitsToFloat(w[i] & 0xffff0000u);
#else
		f[i] = uintBitsToFloat(w[i]);
#endif
	}
}

shared vec4 sQ[BR * D4];

// PV_ROW(c): acc += P[:, c]·V[row base + c] for the lane's columns.
#define PV_ROW(c) { \
	uvec2 pr = CACHE_ROW(b, base + (c)); \
	OFFSET vb = WIDE(pr.x) * pc.v_b + WIDE(pr.y) * pc.v_s + WIDE(kvh) * pc.v_h; \
	[[unroll]] for (uint i = 0u; i < DVN; ++i) { \
		uint dv = lane + SUBGROUP * i; \
		float vv = dv < DV ? LOAD(EL(v, vb + dv)) : 0.0; \
		[[unroll]] for (uint r = 0u; r < BR; ++r) { \
			acc[r * DVN + i] = fma(sP[pbase + (c) * BR + r], vv, acc[r * DVN + i]); \
		} \
	} \
}
shared float sP[NSG * SUBGROUP * BR];
shared float sM[BR * (DV + 2u)]; // merge slot: O rows, then m, then l

void main() {
	const uint split = gl_WorkGroupID.x;
	const uint rtiles = (pc.group * pc.Nq + BR - 1u) / BR;
	const uint kvh = gl_WorkGroupID.y / rtiles;
	const uint r0 = (gl_WorkGroupID.y % rtiles) * BR;
	const uint b = gl_WorkGroupID.z;
	const uint rows = pc.group * pc.Nq;
	const uint n = SEQ_LEN(b);
	const uint tid = gl_SubgroupID * SUBGROUP + gl_SubgroupInvocationID;
	const uint sg = gl_SubgroupID;
	const uint lane = gl_SubgroupInvocationID;
	const float sl2 = pc.scale * LOG2E;

	// Row r of the tile: query qi = (r0 + r) / group of head
	// kvh·group + (r0 + r) mod group; lim[r] rows of the sequence visible.
	uint lim[BR];
	uint lim_hi = 0u;
	[[unroll]] for (uint r = 0u; r < BR; ++r) {
		uint gr = r0 + r;
		lim[r] = gr < rows ? kv_key_limit(gr / pc.group, n) : 0u;
		lim_hi = max(lim_hi, lim[r]);
	}
	const uint j_lo = split * pc.split_keys;
	const uint j_end = min(min(n, j_lo + pc.split_keys), lim_hi);

	STRIDED_BEGIN(e, BR * D4)
		uint r = e / D4;
		uint d = (e - r * D4) * 4u;
		uint gr = r0 + r;
		vec4 x = vec4(0.0);
		if (gr < rows) {
			uint h = kvh * pc.group + gr % pc.group;
			OFFSET qb = WIDE(b) * pc.q_b + WIDE(gr / pc.group) * pc.q_s + WIDE(h) * pc.q_h;
			[[unroll]] for (uint c = 0u; c < 4u; ++c) {
				if (d + c < D) {
					x[c] = LOAD(EL(q, qb + d + c)) * sl2;
				}
			}
		}
		sQ[e] = x;
	STRIDED_END
	barrier();

	float m[BR];
	float l[BR];
	float acc[BR * DVN];
	[[unroll]] for (uint r = 0u; r < BR; ++r) {
		m[r] = NEG_INF;
		l[r] = 0.0;
	}
	[[unroll]] for (uint i = 0u; i < BR * DVN; ++i) {
		acc[i] = 0.0;
	}
	const uint pbase = sg * SUBGROUP * BR;

	for (uint base = j_lo + sg * SUBGROUP; base < j_end; base += WG) {
		const uint j = base + lane;
		const bool live = j < j_end;
		float s[BR];
		[[unroll]] for (uint r = 0u; r < BR; ++r) {
			s[r] = 0.0;
		}
		if (live) {
			uvec2 pr = CACHE_ROW(b, j);
			OFFSET kb = WIDE(pr.x) * pc.k_b + WIDE(pr.y) * pc.k_s + WIDE(kvh) * pc.k_h;
			if (KVEC == 1u) {
				// EPV is 4 or 8: whole vec4 units of Q per 16-byte unit.
				UNROLLED_BEGIN(u, D / EPV)
					float f[EPV];
					unpack_unit(VEC(k, kb / EPV + u), f);
					[[unroll]] for (uint c = 0u; c < EPV / 4u; ++c) {
						vec4 kd = vec4(f[4u * c], f[4u * c + 1u], f[4u * c + 2u], f[4u * c + 3u]);
						[[unroll]] for (uint r = 0u; r < BR; ++r) {
							s[r] += dot(sQ[r * D4 + u * (EPV / 4u) + c], kd);
						}
					}
				UNROLLED_END
			} else {
				UNROLLED_BEGIN(d4, D4)
					vec4 kd = vec4(0.0);
					[[unroll]] for (uint c = 0u; c < 4u; ++c) {
						if (d4 * 4u + c < D) {
							kd[c] = LOAD(EL(k, kb + d4 * 4u + c));
						}
					}
					[[unroll]] for (uint r = 0u; r < BR; ++r) {
						s[r] += dot(sQ[r * D4 + d4], kd);
					}
				UNROLLED_END
			}
		}
		[[unroll]] for (uint r = 0u; r < BR; ++r) {
			float x = live && j < lim[r] ? s[r] : NEG_INF;
			float mnew = max(m[r], subgroupMax(x));
			// A row that has seen no key yet keeps m = −inf; exponentiate
			// against 0 then, so that exp2(−inf − 0) = 0 and never NaN.
			float muse = mnew == NEG_INF ? 0.0 : mnew;
			float alpha = exp2(m[r] - muse);
			float p = exp2(x - muse);
			m[r] = mnew;
			l[r] = l[r] * alpha + p;
			sP[pbase + lane * BR + r] = p;
			[[unroll]] for (uint i = 0u; i < DVN; ++i) {
				acc[r * DVN + i] *= alpha;
			}
		}
		subgroupMemoryBarrierShared();
		subgroupBarrier();
		// O += P·V over the block's live rows (rows past them are never
		// read: the cache holds anything there).
		const uint nlive = min(SUBGROUP, j_end - base);
		if (nlive == SUBGROUP) {
			// Unrolled: the block's V loads issue together instead of one
			// dependent row at a time.
			[[unroll]] for (uint c = 0u; c < SUBGROUP; ++c) {
				PV_ROW(c)
			}
		} else {
			for (uint c = 0u; c < nlive; ++c) {
				PV_ROW(c)
			}
		}
		subgroupBarrier();
	}
	[[unroll]] for (uint r = 0u; r < BR; ++r) {
		l[r] = subgroupAdd(l[r]);
	}

	// Merge the subgroups' partial results into subgroup 0, one at a time.
	for (uint g = 1u; g < NSG; ++g) {
		barrier();
		if (sg == g) {
			[[unroll]] for (uint r = 0u; r < BR; ++r) {
				[[unroll]] for (uint i = 0u; i < DVN; ++i) {
					uint dv = lane + SUBGROUP * i;
					if (dv < DV) {
						sM[r * DV + dv] = acc[r * DVN + i];
					}
				}
				if (lane == 0u) {
					sM[BR * DV + r] = m[r];
					sM[BR * DV + BR + r] = l[r];
				}
			}
		}
		barrier();
		if (sg == 0u) {
			[[unroll]] for (uint r = 0u; r < BR; ++r) {
				float mg = sM[BR * DV + r];
				float mnew = max(m[r], mg);
				float muse = mnew == NEG_INF ? 0.0 : mnew;
				float a0 = exp2(m[r] - muse);
				float a1 = exp2(mg - muse);
				m[r] = mnew;
				l[r] = l[r] * a0 + sM[BR * DV + BR + r] * a1;
				[[unroll]] for (uint i = 0u; i < DVN; ++i) {
					uint dv = min(lane + SUBGROUP * i, DV - 1u); // clamped read; never stored
					acc[r * DVN + i] = acc[r * DVN + i] * a0 + sM[r * DV + dv] * a1;
				}
			}
		}
	}
	if (sg != 0u) {
		return;
	}
	[[unroll]] for (uint r = 0u; r < BR; ++r) {
		uint gr = r0 + r;
		if (gr >= rows) {
			continue;
		}
		uint qi = gr / pc.group;
		uint h = kvh * pc.group + gr % pc.group;
		// l ≥ 1 whenever the row saw a key (its max contributes 1).
		float inv = l[r] == 0.0 ? 0.0 : 1.0 / l[r];
		float l2 = l[r] == 0.0 ? NEG_INF : m[r] + log2(l[r]);
		uint row = (b * pc.Hq + h) * pc.Nq + qi;
		if (pc.splits == 1u) {
			OFFSET ob = WIDE(b) * pc.o_b + WIDE(qi) * pc.o_s + WIDE(h) * pc.o_h;
			[[unroll]] for (uint i = 0u; i < DVN; ++i) {
				uint dv = lane + SUBGROUP * i;
				if (dv < DV) {
					EL(o, ob + dv) = STORE(acc[r * DVN + i] * inv);
				}
			}
			if (lane == 0u) {
				lse_buf[row] = l2 * LN2;
			}
		} else {
			uint prow = split * pc.B * pc.Hq * pc.Nq + row;
			[[unroll]] for (uint i = 0u; i < DVN; ++i) {
				uint dv = lane + SUBGROUP * i;
				if (dv < DV) {
					part[prow * DV + dv] = acc[r * DVN + i] * inv;
				}
			}
			if (lane == 0u) {
				part[pc.splits * pc.B * pc.Hq * pc.Nq * DV + prow] = l2;
			}
		}
	}
}
