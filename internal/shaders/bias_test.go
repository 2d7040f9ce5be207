package shaders

import (
	"testing"

	"github.com/flashvk/flashvk/internal/spec"
)

// TestDSChunking: the planes of a folding dBias's scratch are a multiple
// or a divisor of the inner dimension (Hq, or B head-major where dBias
// keeps the heads and folds the batch), as many as maxBytes holds (one at
// least), and the chunks' dQ boxes cover every (head, batch) once, in the
// planes' order.
func TestDSChunking(t *testing.T) {
	const plane = 4 * 10 * 20
	for _, c := range []struct {
		b, hq            int
		batch, head, row int // the dBias strides (0 folds)
		most             int // maxBytes in planes
		want             DSChunks
		spans            bool // an element's planes in more than one chunk
	}{
		{3, 4, 0, 0, 20, 100, DSChunks{Planes: 12, Chunks: 1}, false},
		{3, 4, 0, 0, 20, 7, DSChunks{Planes: 4, Chunks: 3}, true},
		{3, 4, 0, 0, 20, 3, DSChunks{Planes: 2, Chunks: 6}, true},
		{3, 4, 0, 0, 20, 0, DSChunks{Planes: 1, Chunks: 12}, true},
		{3, 4, 0, 200, 20, 7, DSChunks{Planes: 6, Chunks: 2, HeadMajor: true}, false},
		{3, 4, 0, 200, 20, 2, DSChunks{Planes: 1, Chunks: 12, HeadMajor: true}, true},
		{3, 4, 800, 0, 20, 5, DSChunks{Planes: 4, Chunks: 3}, false},
		{3, 4, 800, 0, 20, 3, DSChunks{Planes: 2, Chunks: 6}, true},
		{3, 4, 80, 20, 0, 8, DSChunks{Planes: 8, Chunks: 2}, false},
		{1, 5, 0, 200, 20, 3, DSChunks{Planes: 1, Chunks: 5}, false},
	} {
		p := &spec.Problem{B: c.b, Hq: c.hq, Nq: 10, Nk: 20,
			Ext: &spec.Ext{Bias: &spec.Bias{Grad: true, GradBatch: c.batch, GradHead: c.head, GradRow: c.row}}}
		got := DSChunking(p, int64(c.most)*plane)
		if got != c.want {
			t.Errorf("%+v: %+v, want %+v", c, got, c.want)
			continue
		}
		if s := got.Spans(p); s != c.spans {
			t.Errorf("%+v: Spans %v, want %v", c, s, c.spans)
		}
		seen := map[[2]uint32]int{}
		next := 0 // the next plane in the order
		for k := range got.Chunks {
			base, n := got.DQBox(p, k, 7)
			if base[0] != 0 || n[0] != 7 {
				t.Errorf("%+v chunk %d: tiles %d from %d", c, k, n[0], base[0])
			}
			var order []int
			for y := base[1]; y < base[1]+n[1]; y++ {
				for z := base[2]; z < base[2]+n[2]; z++ {
					seen[[2]uint32{y, z}]++
					q := int(z)*c.hq + int(y)
					if got.HeadMajor {
						q = int(y)*c.b + int(z)
					}
					order = append(order, q)
				}
			}
			for _, q := range order {
				if q < next || q >= next+len(order) || q >= k*got.Planes+got.Planes {
					t.Errorf("%+v chunk %d: plane %d outside %d … %d", c, k, q, next, next+len(order)-1)
				}
			}
			next += len(order)
		}
		if len(seen) != c.b*c.hq || next != c.b*c.hq {
			t.Errorf("%+v: the boxes cover %d (head, batch) pairs in %d planes, want %d", c, len(seen), next, c.b*c.hq)
		}
		for k, v := range seen {
			if v != 1 {
				t.Errorf("%+v: (head, batch) %v in %d chunks", c, k, v)
			}
		}
	}
}
