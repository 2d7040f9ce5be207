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
//   5 META uint32: lengths [B], then the page table [B, max_pages], then
//          with EXT ≠ 0 the options header at KV_META_EXT
//          (kv_params.glsl; shaders.KVMetaWords)
//   6 PART float32, written when splits > 1: per split, the partial O
//          [splits,B,Hq,Nq,DV] (normalised by its own sum) followed by the
//          partial log2-sum-exp [splits,B,Hq,Nq] (−inf: the split saw no
//          row), which decode_combine merges.
// Spec constants: 0 WG, 1 D, 2 DV, 3 BR (rows per workgroup), 5 SUBGROUP
//   (4 BC unused), 7 KVEC: 1 reads each cache K row in 16-byte units
//   (the host sets it when D and K's strides are multiples of 16 bytes),
//   0 element by element. 8 EXT (shaders.ExtSpec): 0 builds the plain
//   kernel, which reads no options (pc.mask's causal rule); bit 0 reads
//   the window, the diagonal's alignment and the flags from META's
//   header (spec.Ext: the window is then the whole mask), bit 1 compiles
//   in the softcap and bit 2 ALiBi — a kernel carries only the terms its
//   call uses. WG is a multiple of SUBGROUP; full subgroups.
// Grid: (splits, Hkv·ceil(group·Nq/BR), B): workgroup (x, y, z) computes
//   split x (cache rows x·split_keys … of sequence z) for BR rows of the
//   group·Nq rows that read KV head y / ceil(group·Nq/BR) (GQA packing:
//   row r is query r / group of head kvh·group + r mod group, so the heads
//   that share a KV head read each cache row once per workgroup). With
//   EXT the splits start at the sequence's first visible row (row 0's
//   key_first: the host sizes them to cover the widest range of rows a
//   sequence's queries see), and each workgroup narrows its split to the
//   union of its rows' ranges: a split no row of the tile sees writes
//   the empty partial result (O = 0, l2 = −inf).
//
// Thread layout: NSG = WG/SUBGROUP subgroups, each an independent stream
// of SUBGROUP cache rows at a time (rows base … base+SUBGROUP−1, base
// stepping by WG): lane c scores cache row base+c against the BR query
// rows (Q staged in shared memory, pre-scaled by scale·log2 e — by scale
// alone with a softcap, whose c·tanh(s/c) takes the natural score and is
// multiplied by log2 e after; ALiBi then subtracts slope·log2 e·|diag − j|), the
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
layout(constant_id = 8) const uint EXT = 0u;
#define EXT_ON_SOFTCAP 2u
#define EXT_ON_ALIBI 4u
// Flags of the options header (shaders.ExtBottomRight, ExtALiBiBatch).
#define KV_BOTTOM_RIGHT 1u
#define KV_ALIBI_BATCH 8u

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
	// Q's factor: scale·log2e, or with a softcap scale (the score is
	// c·tanh(s/c)·log2e).
	const float sl2 = (EXT & EXT_ON_SOFTCAP) != 0u ? pc.scale : pc.scale * LOG2E;

	// The options (EXT): the window (−1 unbounded), the diagonal's offset
	// (row qi's diagonal is key qi + off) and the softcap.
	const uint xh = KV_META_EXT;
	int left = -1;
	int right = -1;
	int off = 0;
	uint flags = 0u;
	float cap_l2 = 0.0;  // c·log2e
	float inv_cap2 = 0.0; // 2·log2e/c (tanh2's argument per unit of z)
	if (EXT != 0u) {
		left = int(meta[xh]);
		right = int(meta[xh + 1u]);
		flags = meta[xh + 2u];
		off = (flags & KV_BOTTOM_RIGHT) != 0u ? int(n) - int(pc.Nq) : 0;
		if ((EXT & EXT_ON_SOFTCAP) != 0u) {
			float c = uintBitsToFloat(meta[xh + 3u]);
			cap_l2 = c * LOG2E;
			inv_cap2 = (2.0 * LOG2E) / c;
		}
	}

	// Row r of the tile: query qi = (r0 + r) / group of head
	// kvh·group + (r0 + r) mod group; it sees rows first[r] … lim[r]−1 of
	// the sequence (spec.Problem.KeyRange), with ALiBi slope slope[r]
	// (times log2e) and diagonal diag[r].
	uint first[BR];
	uint lim[BR];
	float slope[BR];
	int diag[BR];
	uint first_lo = n; // the union of the rows' ranges: first_lo … lim_hi−1
	uint lim_hi = 0u;
	[[unroll]] for (uint r = 0u; r < BR; ++r) {
		uint gr = r0 + r;
		first[r] = 0u;
		slope[r] = 0.0;
		diag[r] = 0;
		if (EXT != 0u) {
			lim[r] = 0u;
			if (gr < rows) {
				int d = int(gr / pc.group) + off;
				int lo = left < 0 ? 0 : clamp(d - left, 0, int(n));
				int hi = right < 0 ? int(n) : clamp(d + right + 1, 0, int(n));
				first[r] = uint(lo);
				lim[r] = uint(max(hi, lo));
				diag[r] = d;
				if ((EXT & EXT_ON_ALIBI) != 0u) {
					uint h = kvh * pc.group + gr % pc.group;
					uint idx = (flags & KV_ALIBI_BATCH) != 0u ? b * pc.Hq + h : h;
					slope[r] = uintBitsToFloat(meta[xh + 4u + idx]) * LOG2E;
				}
			}
			if (lim[r] > first[r]) {
				first_lo = min(first_lo, first[r]);
				lim_hi = max(lim_hi, lim[r]);
			}
		} else {
			lim[r] = gr < rows ? kv_key_limit(gr / pc.group, n) : 0u;
			lim_hi = max(lim_hi, lim[r]);
		}
	}
	// Split x covers rows seq0 + x·split_keys … of the sequence (seq0 its
	// first visible row with EXT: row 0's key_first), narrowed to the rows
	// some row of the tile sees.
	uint seq0 = 0u;
	if (EXT != 0u && left >= 0) {
		seq0 = uint(clamp(off - left, 0, int(n)));
	}
	const uint s_lo = seq0 + split * pc.split_keys;
	const uint j_end = min(min(n, s_lo + pc.split_keys), lim_hi);
	uint j_lo = s_lo;
	if (EXT != 0u) {
		j_lo = max(j_lo, first_lo);
	}

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
			bool vis = live && j < lim[r];
			float z = s[r];
			if (EXT != 0u) {
				vis = vis && j >= first[r];
				if ((EXT & EXT_ON_SOFTCAP) != 0u) {
					z = cap_l2 * tanh2(z * inv_cap2);
				}
				if ((EXT & EXT_ON_ALIBI) != 0u) {
					z -= slope[r] * abs(float(diag[r] - int(j)));
				}
			}
			float x = vis ? z : NEG_INF;
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
