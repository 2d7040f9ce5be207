package attention_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/attention/attentiontest"
)

// TestKVCacheCPU runs the KV-cache suite (decoding over contiguous and
// paged caches, host and device forms, argument checks) on the CPU backend.
func TestKVCacheCPU(t *testing.T) {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	attentiontest.RunKVCache(t, e)
}

// TestKVCacheOptionErrors: KV-cache calls take Window, Softcap and ALiBi
// (host, device and plan forms alike) and refuse SeqUsedK, CuSeqlens and
// Dropout with ErrOption, naming them.
func TestKVCacheOptionErrors(t *testing.T) {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	kv := attention.Shape{B: 2, S: 8, H: 1, D: 4}
	k, _ := attention.NewTensor(attention.Float32, kv, attention.BSHD)
	v, _ := attention.NewTensor(attention.Float32, kv, attention.BSHD)
	q, _ := attention.NewTensor(attention.Float32, attention.Shape{B: 2, S: 1, H: 2, D: 4}, attention.BSHD)
	for name, c := range map[string]struct {
		opt  attention.Options
		name string // in the error; "" for success
	}{
		"window":   {attention.Options{Window: &attention.Window{Left: 2, Right: 0}, Causal: true, Align: attention.BottomRight}, ""},
		"softcap":  {attention.Options{Softcap: 50}, ""},
		"alibi":    {attention.Options{ALiBi: []float32{0.5, 0.25}}, ""},
		"alibi-bh": {attention.Options{ALiBi: []float32{0.5, 0.25, 1, 2}, Align: attention.BottomRight}, ""},
		"seqused":  {attention.Options{SeqUsedK: []int32{1, 1}}, "SeqUsedK"},
		"cu":       {attention.Options{CuSeqlensQ: []int32{0, 1, 2}, CuSeqlensK: []int32{0, 3, 5}}, "CuSeqlens"},
		"dropout":  {attention.Options{Dropout: &attention.Dropout{P: 0.5}}, "Dropout"},
	} {
		cache := &attention.KVCache{K: k, V: v, SeqLens: []int32{3, 5}}
		_, err := e.ForwardKVCache(t.Context(), q, cache, attention.Tensor{}, attention.Tensor{}, c.opt)
		_, perr := e.PlanKVCache(t.Context(), q.Shape, cache, 0, attention.BSHD, attention.Float32, c.opt)
		for _, err := range []error{err, perr} {
			switch {
			case c.name == "" && err != nil:
				t.Errorf("%s: %v", name, err)
			case c.name != "" && (!errors.Is(err, attention.ErrOption) || !strings.Contains(err.Error(), c.name)):
				t.Errorf("%s: %v, want ErrOption naming %s", name, err, c.name)
			}
		}
	}
}
