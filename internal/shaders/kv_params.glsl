// kv_params.glsl: the push-constant block and helpers of the KV-cache
// kernels (decode, decode_combine, kv_append), mirrored field for field by
// shaders.KVParams (params_test.go checks the offsets against the SPIR-V).
// A kernel includes it after params.glsl (the attention kernels include
// attn_params.glsl instead).
//
// The cache: sequence b's row j lies in page meta[B + b·max_pages +
// j/page_size], row j mod page_size, of K [pages, page_size, Hkv, D] and V
// [pages, page_size, Hkv, DV] (pc.k_* and pc.v_*: the batch stride is the
// page stride); a contiguous cache is one page of Nmax rows per sequence.
// meta[b] (b < B) is sequence b's cached length before the append of
// new_rows rows; it attends to its first meta[b] + new_rows rows
// (internal/spec.KV).
//
// META (uint32, shaders.KVMetaWords is the layout's one definition):
// words 0 … B−1 the lengths, B … B+B·max_pages−1 the page table, then —
// only for a call with options (decode's EXT ≠ 0) — the options header
// at KV_META_EXT: word 0 left, 1 right (the window, int32; −1 unbounded,
// also for a side wider than Nq + the capacity; causal: right 0), 2 the
// flags (1 bottom-right diagonal, 2 softcap, 4 ALiBi, 8 ALiBi slopes per
// sequence and head), 3 the softcap c (float32 bits), from 4 the ALiBi
// slopes (float32, [Hq] or [B, Hq]). Row i of sequence b (n rows) has
// its diagonal at key i + n − Nq bottom-right, else i, and sees rows
// j < n with diagonal − left ≤ j ≤ diagonal + right (spec.Ext).

layout(push_constant) uniform KVParams {
	uint B; uint Hq; uint Hkv; uint Nq; uint group;
	uint q_b; uint q_s; uint q_h;       // Q; element strides, feature stride 1
	uint k_b; uint k_s; uint k_h;       // cache K: page, row, head
	uint v_b; uint v_s; uint v_h;       // cache V
	uint o_b; uint o_s; uint o_h;       // O
	float scale;                        // softmax scale (resolved, never 0)
	uint mask;                          // 0 none, 1 causal top-left, 2 causal bottom-right (per sequence)
	uint page_size; uint max_pages;     // cache paging (see above)
	uint new_rows;                      // rows appended per sequence
	uint nk_b; uint nk_s; uint nk_h;    // new K [B, new_rows, Hkv, D]
	uint nv_b; uint nv_s; uint nv_h;    // new V
	uint split_keys;                    // cache rows per split (decode)
	uint splits;                        // splits per sequence; 1: decode writes O and LSE itself
} pc;

// seq_len is the number of cache rows sequence b attends to.
#define SEQ_LEN(b) (meta[b] + pc.new_rows)

// KV_META_EXT is the word of META where the options header starts.
#define KV_META_EXT (pc.B + pc.B * pc.max_pages)

// cache_row returns (page, row in page) of row j of sequence b.
#define CACHE_ROW(b, j) uvec2(meta[pc.B + (b) * pc.max_pages + (j) / pc.page_size], (j) % pc.page_size)

// kv_key_limit: query row i of a sequence of n rows sees rows
// 0 … kv_key_limit(i, n)−1 (spec.Problem.KeyLimit with Nk = n).
uint kv_key_limit(uint i, uint n) {
	if (pc.mask == MASK_CAUSAL_TL) {
		return min(i + 1u, n);
	}
	if (pc.mask == MASK_CAUSAL_BR) {
		int lim = int(i) + 1 + int(n) - int(pc.Nq);
		return uint(clamp(lim, 0, int(n)));
	}
	return n;
}
