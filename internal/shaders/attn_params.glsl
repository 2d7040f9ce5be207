// attn_params.glsl: the push-constant block of the attention kernels
// (forward and backward; mirrored field for field by shaders.Params,
// params_test.go checks the offsets against the compiled SPIR-V) and the
// helpers that read it: masking (mask_key_limit / mask_query_first,
// and the kernels' key_limit … without ext.glsl), row base
// offsets (q_base …) and LSE/D indexing. Include it after params.glsl.
// The KV-cache kernels have their own block (kv_params.glsl).

// Push constants: 20 × 4 = 80 bytes; ADDRESSED modules append the operand
// addresses at byte 80, 128 bytes in all (the Vulkan minimum of
// maxPushConstantsSize).
layout(push_constant) uniform Params {
	uint B; uint Hq; uint Hkv; uint Nq; uint Nk;
	uint q_b; uint q_s; uint q_h;   // element strides (batch, seq, head); feature stride 1
	uint k_b; uint k_s; uint k_h;
	uint v_b; uint v_s; uint v_h;
	uint o_b; uint o_s; uint o_h;   // O and dO
	float scale;                    // softmax scale (resolved, never 0)
	uint mask;                      // 0 none, 1 causal top-left, 2 causal bottom-right
	uint group;                     // Hq / Hkv
#ifdef ADDRESSED
	uint64_t addr[6];               // per address slot: element 0 of its operand (shaders.MaxAddressSlots)
#endif
} pc;

// The sequence a workgroup works on, set by seq_begin(b) (or, in a
// kernel with ext.glsl, by ext_begin, which also reads packed
// variable-length sequences from the Ext buffer): its query and key rows
// (seq_nq, seq_nk) and where they start in Q/O and K/V (seq_q0, seq_k0;
// 0 unless packed), and its LSE/D rows (lse_index). A kernel calls it
// once it knows b, before any row base or LSE index.
uint seq_nq;
uint seq_nk;
uint seq_q0;
uint seq_k0;
uint seq_lse0; // LSE/D index of (b, head 0, row 0)
uint seq_lse_h; // … and the stride of a head

void seq_begin(uint b) {
	seq_nq = pc.Nq;
	seq_nk = pc.Nk;
	seq_q0 = 0u;
	seq_k0 = 0u;
	seq_lse0 = b * pc.Hq * pc.Nq;
	seq_lse_h = pc.Nq;
}


// mask_key_limit mirrors spec.Problem.KeyLimit: under pc.mask query row i
// sees keys 0 … mask_key_limit(i)−1; 0 for a row that sees no key, Nk
// when unmasked.
uint mask_key_limit(uint i) {
	if (pc.mask == MASK_CAUSAL_TL) {
		return min(i + 1u, pc.Nk);
	}
	if (pc.mask == MASK_CAUSAL_BR) {
		int lim = int(i) + 1 + int(pc.Nk) - int(pc.Nq);
		return uint(clamp(lim, 0, int(pc.Nk)));
	}
	return pc.Nk;
}

// mask_query_first returns the first query row that sees key j under
// pc.mask (mask_key_limit is non-decreasing in i, so rows
// mask_query_first(j) … Nq−1 see it); it may be ≥ Nq when no row sees
// key j.
uint mask_query_first(uint j) {
	if (pc.mask == MASK_CAUSAL_TL) {
		return j;
	}
	if (pc.mask == MASK_CAUSAL_BR) {
		int f = int(j) + int(pc.Nq) - int(pc.Nk);
		return uint(max(f, 0));
	}
	return 0u;
}

// The masking helpers the kernels call: ext.glsl's in a kernel that
// defines EXT_BINDING (and includes ext.glsl next), else pc.mask's rule:
// query row i sees keys key_first(i) … key_limit(i)−1, key j is seen by
// query rows query_first(j) … query_limit(j)−1.
#ifndef EXT_BINDING
uint key_first(uint i) { return 0u; }
uint key_limit(uint i) { return mask_key_limit(i); }
uint query_first(uint j) { return mask_query_first(j); }
uint query_limit(uint j) { return seq_nq; }
#endif

// Row bases of row s of the workgroup's sequence (b, from seq_begin).
OFFSET q_base(uint b, uint s, uint h) { return WIDE(b) * pc.q_b + WIDE(seq_q0 + s) * pc.q_s + WIDE(h) * pc.q_h; }
OFFSET k_base(uint b, uint s, uint h) { return WIDE(b) * pc.k_b + WIDE(seq_k0 + s) * pc.k_s + WIDE(h) * pc.k_h; }
OFFSET v_base(uint b, uint s, uint h) { return WIDE(b) * pc.v_b + WIDE(seq_k0 + s) * pc.v_s + WIDE(h) * pc.v_h; }
// O and dO share O's strides (dQ uses q_base, dK k_base, dV v_base).
OFFSET o_base(uint b, uint s, uint h) { return WIDE(b) * pc.o_b + WIDE(seq_q0 + s) * pc.o_s + WIDE(h) * pc.o_h; }
// Index of row (b, h, i) in LSE and D (contiguous [B,Hq,Nq]; [Hq,Tq]
// when packed).
uint lse_index(uint b, uint h, uint i) { return seq_lse0 + h * seq_lse_h + i; }

// kv_head maps a query head to the key/value head it reads (GQA).
uint kv_head(uint h) { return h / pc.group; }
