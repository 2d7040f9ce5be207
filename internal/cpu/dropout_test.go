package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/internal/spec/spectest"
	"github.com/flashvk/flashvk/reference"
)

// dropProbs are the dropout probabilities the tests draw masks with.
var dropProbs = []float64{0.1, 0.5, 0.9}

// dropOf returns the dropout of probability p with a seed and offset
// that depend on k.
func dropOf(p float64, k int) *spec.Dropout {
	return &spec.Dropout{Threshold: spec.DropThreshold(p), Seed: 0x9e3779b97f4a7c15 * uint64(k+1), Offset: uint32(3 * k)}
}

// TestDropoutGroups: the unrolled generator and the vector kernel draw
// spec.Dropout's bits, which are package reference's (its own Philox),
// in groups of 8 keys (halves of its blocks of 16), and apply multiplies
// each element by its factor (group j>>3, bit j&7, for keys that start
// anywhere in a group).
func TestDropoutGroups(t *testing.T) {
	testDropoutGroups(t)
}

// TestDropoutGroupsPortable repeats TestDropoutGroups without the vector
// kernels when they are in use.
func TestDropoutGroupsPortable(t *testing.T) {
	portableKernels(t, "TestDropoutGroups")
	testDropoutGroups(t)
}

func testDropoutGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, thr := range []uint32{1, 2, 26, 127, 128, 129, 230, 255} {
		d := &spec.Dropout{Threshold: thr, Seed: rng.Uint64(), Offset: rng.Uint32(), Batch0: rng.IntN(5)}
		p := &spec.Problem{B: 7, Hq: 6, Hkv: 3, Nq: 5000, Nk: 5000, D: 8, Dv: 8,
			Ext: &spec.Ext{Left: -1, Right: -1, Dropout: d}}
		ref := spectest.Dropout(p)
		require.Equal(t, thr, ref.Threshold())
		kept := 0
		for range 400 {
			b, h, i, g := rng.IntN(p.B), rng.IntN(p.Hq), rng.IntN(p.Nq), rng.IntN(p.Nk/8)
			dr := newDropper(p, b, h)
			bits := dr.group(i, g)
			require.Equal(t, keepGroup(d, p.Hq, b, h, i, g), bits, "threshold %d b%d h%d i%d g%d", thr, b, h, i, g)
			for e := range 8 {
				require.Equal(t, ref.Keep(p.Hq, d.Batch0+b, h, i, 8*g+e), bits>>e&1 == 1, "threshold %d b%d h%d i%d j%d", thr, b, h, i, 8*g+e)
				kept += int(bits >> e & 1)
			}
			var eight [8]uint32 // the vector kernel's eight groups, when in use
			n := 1 + rng.IntN(8)
			dr.draw(&eight, i, g, n)
			for x := range n {
				require.Equal(t, uint32(keepGroup(d, p.Hq, b, h, i, g+x)), eight[x], "threshold %d b%d h%d i%d g%d", thr, b, h, i, g+x)
			}

			j, n := rng.IntN(p.Nk-40), rng.IntN(40)
			r := make([]float32, n)
			for x := range r {
				r[x] = float32(x + 1)
			}
			dr.apply(r, i, j, &dr.keepScale)
			for x, y := range r {
				want := float32(x+1) * float32(d.Scale())
				if !d.Keep(p.Hq, b, h, i, j+x) {
					want = negZero
				}
				require.Equal(t, math.Float32bits(want), math.Float32bits(y), "key %d", j+x)
			}
		}
		// The kept share is about 1 − Threshold/2⁸.
		share, want := float64(kept)/3200, 1-float64(thr)/spec.DropLevels
		assert.InDelta(t, want, share, 0.05, "threshold %d", thr)
	}
}

// keepGroup is spec.Dropout's keep bits of the 8 keys 8g … 8g+7 of row i:
// half g mod 2 of its block g/2.
func keepGroup(d *spec.Dropout, hq, b, h, i, g int) uint8 {
	return uint8(d.KeepBlock(hq, b, h, i, g>>1) >> (8 * uint(g&1)))
}

// dropoutCases combine each dropout probability with awkward sizes (1,
// 17, 127, 129, keys not a multiple of 8), tiles whose key tiles start
// inside a group of 8 keys, both causal alignments with Nq ≠ Nk both
// ways, windows, softcaps, ALiBi slopes, key counts (0 included), GQA and
// MQA, D ≠ Dv, strided layouts, and a problem that is a later chunk of a
// batch (Batch0 > 0).
func dropoutCases() []tcase {
	var cases []tcase
	add := func(c tcase) { cases = append(cases, c.withDefaults()) }
	for k, pr := range dropProbs {
		d := dropOf(pr, k)
		drop := func(e *spec.Ext) { e.Dropout = d }
		none := with(&spec.Ext{Left: -1, Right: -1}, drop)
		for _, n := range [][2]int{{1, 1}, {1, 129}, {17, 17}, {127, 129}, {129, 127}, {129, 1}} {
			add(tcase{b: 2, hq: 4, hkv: 2, nq: n[0], nk: n[1], d: 16, ext: none})
		}
		add(tcase{b: 2, hq: 2, hkv: 1, nq: 37, nk: 131, d: 16, dv: 24, ext: none, cfg: Config{Br: 7, Bc: 5}})
		add(tcase{b: 1, hq: 2, hkv: 2, nq: 70, nk: 70, d: 64, ext: none, layout: "packed"})
		for _, br := range []bool{false, true} {
			e, m := window(-1, 0, br)
			add(tcase{b: 2, hq: 4, hkv: 2, nq: 33, nk: 129, d: 16, mask: m, ext: with(e, drop), cfg: Config{Br: 8, Bc: 12}})
			add(tcase{b: 2, hq: 4, hkv: 2, nq: 129, nk: 33, d: 16, mask: m, ext: with(e, drop)})
			e, m = window(7, 2, br)
			add(tcase{b: 2, hq: 4, hkv: 2, nq: 129, nk: 127, d: 16, mask: m, ext: with(e, drop), cfg: Config{Br: 8, Bc: 4}})
		}
		add(tcase{b: 2, hq: 4, hkv: 2, nq: 65, nk: 70, d: 16, ext: with(none, func(e *spec.Ext) { e.Softcap = 5 }), layout: "padded"})
		add(tcase{b: 2, hq: 4, hkv: 2, nq: 65, nk: 65, d: 16, layout: "bhsd",
			ext: with(none, func(e *spec.Ext) { e.Slopes, e.SlopesPerBatch = append(alibi(4), 0.7, 0.05, 0.3, 0.01), true })})
		add(tcase{b: 3, hq: 8, hkv: 1, nq: 33, nk: 129, d: 16, ext: with(none, func(e *spec.Ext) { e.SeqUsedK = []int32{0, 17, 100} }),
			cfg: Config{Br: 16, Bc: 16}})
		w, m := window(11, 0, true)
		all := func(e *spec.Ext) {
			e.Softcap = 3
			e.Slopes, e.SlopesPerBatch = []float32{0.5, 0.25, 0.125, 0.0625, 0.3, 0.2, 0.1, 0.05}, true
			e.SeqUsedK = []int32{100, 33}
			e.Dropout = d
		}
		add(tcase{b: 2, hq: 4, hkv: 2, nq: 33, nk: 129, d: 40, dv: 24, mask: m, ext: with(w, all), cfg: Config{Br: 8, Bc: 16, Workers: 3}})
	}
	later := *dropOf(0.3, 9)
	later.Batch0 = 5
	add(tcase{b: 2, hq: 4, hkv: 2, nq: 40, nk: 50, d: 16, ext: &spec.Ext{Left: -1, Right: 0, BottomRight: true, Dropout: &later},
		mask: spec.MaskCausalBottomRight})
	return cases
}

// TestDropoutAgainstReference compares problems with dropout with the
// float64 reference (its mask drawn by package reference).
func TestDropoutAgainstReference(t *testing.T) {
	runCases(t, dropoutCases(), checkCase)
}

// TestDropoutAgainstReferencePortable repeats the comparison on the
// portable Go kernels when the vector kernels are in use.
func TestDropoutAgainstReferencePortable(t *testing.T) {
	portableKernels(t, "TestDropoutAgainstReference")
	runCases(t, dropoutCases(), checkCase)
}

// bshd flattens a dense [B, H, N, W] array into a contiguous [B, N, H,
// W] one, package reference's layout.
func bshd(d dense) []float64 {
	x := make([]float64, 0, len(d.x))
	for b := range d.b {
		for n := range d.n {
			for h := range d.h {
				x = append(x, d.row(b, h, n)...)
			}
		}
	}
	return x
}

// refRun draws c's inputs (editing them with edit, if set), runs c's
// forward and backward and package reference's, and returns each one's
// O, LSE, dQ, dK and dV ([B, N, H, W] and [B, Hq, Nq]).
func refRun(t *testing.T, c tcase, edit func(q, k, v, do dense)) (got, want [][]float64) {
	t.Helper()
	p := c.problem()
	ops := layoutViews(p, c.layout)
	q, k, v, do := ops.setInputs(p, rand.New(rand.NewPCG(uint64(c.nq), uint64(c.nk))), 2)
	if edit != nil {
		edit(q, k, v, do)
		ops.q.set(q)
		ops.k.set(k)
		ops.v.set(v)
		ops.do.set(do)
	}
	ctx := context.Background()
	lse := nanFull(p.LSELen())
	require.NoError(t, ForwardWith(ctx, c.cfg, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), lse))
	require.NoError(t, BackwardWith(ctx, c.cfg, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), lse,
		ops.do.buf(), ops.dq.buf(), ops.dk.buf(), ops.dv.buf()))
	l := make([]float64, len(lse))
	for i, x := range lse {
		l[i] = float64(x)
	}
	got = [][]float64{bshd(ops.o.get()), l, bshd(ops.dq.get()), bshd(ops.dk.get()), bshd(ops.dv.get())}

	rp := spectest.Reference(p)
	o, rl, err := reference.Forward(rp, bshd(q), bshd(k), bshd(v))
	require.NoError(t, err)
	dq, dk, dv, err := reference.Backward(rp, bshd(q), bshd(k), bshd(v), bshd(do))
	require.NoError(t, err)
	return got, [][]float64{o, rl, dq, dk, dv}
}

var outputNames = []string{"O", "LSE", "dQ", "dK", "dV"}

// TestDropoutReferencePackage compares problems with dropout directly
// with package reference (reference.Params.Dropout).
func TestDropoutReferencePackage(t *testing.T) {
	var cases []tcase
	for k, pr := range dropProbs {
		d := dropOf(pr, k+10)
		cases = append(cases,
			tcase{b: 2, hq: 4, hkv: 2, nq: 17, nk: 131, d: 16, ext: &spec.Ext{Left: -1, Right: -1, Dropout: d}, cfg: Config{Br: 8, Bc: 12}},
			tcase{b: 2, hq: 4, hkv: 1, nq: 129, nk: 50, d: 24, dv: 16, mask: spec.MaskCausalBottomRight,
				ext: &spec.Ext{Left: -1, Right: 0, BottomRight: true, Dropout: d}},
			tcase{b: 2, hq: 2, hkv: 2, nq: 70, nk: 90, d: 16, mask: spec.MaskCausalTopLeft,
				ext: &spec.Ext{Left: 9, Right: 0, Softcap: 4, Slopes: alibi(2), SeqUsedK: []int32{90, 41}, Dropout: d}, cfg: Config{Br: 16, Bc: 8}},
		)
	}
	for _, c := range cases {
		c = c.withDefaults()
		t.Run(c.String(), func(t *testing.T) {
			got, want := refRun(t, c, nil)
			for x := range got {
				e := relErr(got[x], want[x])
				assert.LessOrEqual(t, e, tol, outputNames[x])
			}
		})
	}
}

// TestDropoutNaN: a dropped element still multiplies its value (0·NaN =
// NaN), as in package reference: a NaN in V reaches the O of every row
// that sees its key, dropped or not, and a NaN in dO the dV of every key
// its row sees; everything else is finite. Both on the vector kernels and
// the portable ones, and for a Dv with a scalar tail.
func TestDropoutNaN(t *testing.T) {
	for _, portable := range []bool{false, true} {
		for _, dv := range []int{16, 20} {
			c := tcase{b: 1, hq: 2, hkv: 1, nq: 20, nk: 37, d: 16, dv: dv, layout: "bshd",
				ext: &spec.Ext{Left: -1, Right: -1, Dropout: dropOf(0.9, 4)}, cfg: Config{Br: 8, Bc: 16}}
			name := c.String()
			if portable {
				name += "_portable"
			}
			t.Run(name, func(t *testing.T) {
				if portable {
					portableKernels(t, "the vector run")
				}
				for _, which := range []string{"V", "dO"} {
					got, want := refRun(t, c, func(_, _, v, do dense) {
						if which == "V" {
							v.row(0, 0, 10)[3] = math.NaN()
							v.row(0, 0, 10)[dv-2] = math.NaN()
						} else {
							do.row(0, 1, 5)[dv-1] = math.NaN()
						}
					})
					nans := 0
					for x := range got {
						for i := range got[x] {
							g, w := math.IsNaN(got[x][i]), math.IsNaN(want[x][i])
							require.Equal(t, w, g, "NaN in %s: %s[%d] = %v, reference %v", which, outputNames[x], i, got[x][i], want[x][i])
							if g {
								nans++
							}
						}
					}
					require.Positive(t, nans)
				}
			})
		}
	}
}

// TestDropoutVarlen: packed sequences with dropout (sequence b drawing
// sequence b's mask) match each sequence run alone, bit for bit, and the
// float64 reference; with empty sequences, key counts and NaN keys past
// them.
func TestDropoutVarlen(t *testing.T) {
	var cases []vcase
	for k, pr := range dropProbs {
		d := dropOf(pr, k+20)
		cases = append(cases,
			vcase{hq: 4, hkv: 2, d: 16, dv: 16, lensQ: []int{1, 17, 129, 0, 5}, lensK: []int{1, 17, 129, 7, 0},
				mask: spec.MaskCausalBottomRight, ext: spec.Ext{Left: -1, Right: 0, BottomRight: true, Dropout: d}, layout: "padded",
				cfg: Config{Br: 16, Bc: 12}},
			vcase{hq: 2, hkv: 1, d: 16, dv: 24, lensQ: []int{17, 0, 127, 1}, lensK: []int{129, 17, 1, 0},
				ext: spec.Ext{Left: -1, Right: -1, Dropout: d}, layout: "bhsd", cfg: Config{Br: 8, Bc: 5}},
			vcase{hq: 4, hkv: 1, d: 16, dv: 16, lensQ: []int{33, 129, 17, 0, 1}, lensK: []int{40, 129, 17, 3, 1},
				mask: spec.MaskCausalTopLeft, layout: "bshd",
				ext: spec.Ext{Left: 5, Right: 0, Softcap: 3, Slopes: alibi(4), SeqUsedK: []int32{20, 127, 0, 2, 1}, Dropout: d}},
		)
	}
	runCases(t, cases, checkPacked)
}

// TestDropoutBatches: a batch run in chunks (Problem.Batches, its
// operands offset to the chunk's first sequence) gives the bits of the
// whole batch's run.
func TestDropoutBatches(t *testing.T) {
	w, m := window(-1, 0, true)
	e := with(w, func(e *spec.Ext) {
		e.Dropout = dropOf(0.4, 30)
		e.SeqUsedK = []int32{60, 0, 17, 70}
		e.Slopes, e.SlopesPerBatch = append(append(alibi(2), 0.3, 0.2), alibi(4)...), true
	})
	c := tcase{b: 4, hq: 2, hkv: 1, nq: 45, nk: 70, d: 16, dv: 16, mask: m, ext: e, layout: "bshd", cfg: Config{Br: 16, Bc: 12}}
	p := c.problem()
	ops := layoutViews(p, c.layout)
	ops.setInputs(p, rand.New(rand.NewPCG(5, 6)), 2)
	ctx := context.Background()
	run := func(p *spec.Problem, b0 int) [][]float32 {
		for _, v := range []view{ops.o, ops.dq, ops.dk, ops.dv} {
			copy(v.full, nanFull(len(v.full)))
		}
		lse := nanFull(c.b * c.hq * c.nq)
		at := func(v view, s spec.Strides) []float32 { return v.buf()[b0*s.Batch:] }
		l := lse[b0*p.Hq*p.Nq:]
		q, k, v, o := at(ops.q, p.Q), at(ops.k, p.K), at(ops.v, p.V), at(ops.o, p.O)
		require.NoError(t, ForwardWith(ctx, c.cfg, p, q, k, v, o, l))
		require.NoError(t, BackwardWith(ctx, c.cfg, p, q, k, v, o, l, at(ops.do, p.O), at(ops.dq, p.Q), at(ops.dk, p.K), at(ops.dv, p.V)))
		cp := func(x []float32) []float32 { return append([]float32(nil), x...) }
		return [][]float32{cp(ops.o.full), lse, cp(ops.dq.full), cp(ops.dk.full), cp(ops.dv.full)}
	}
	whole := run(p, 0)
	for _, chunk := range [][2]int{{0, 1}, {1, 2}, {3, 1}} {
		b0, n := chunk[0], chunk[1]
		got := run(p.Batches(b0, n), b0)
		// Compare the chunk's sequences (the rest is NaN in got).
		for x, g := range got {
			for i, y := range g {
				var b int
				if x == 1 {
					b = i / (c.hq * c.nq)
				} else {
					b = i / (len(g) / c.b)
				}
				if b >= b0 && b < b0+n && !sameBits(y, whole[x][i]) {
					t.Fatalf("chunk %v: %s element %d: %v, want %v", chunk, outputNames[x], i, y, whole[x][i])
				}
			}
		}
	}
	// Batch0 matters: sequence 2 as a chunk drawing sequence 0's mask
	// differs.
	wrong := p.Batches(2, 1)
	d := *wrong.Ext.Dropout
	d.Batch0 = 0
	wrong.Ext.Dropout = &d
	got := run(wrong, 2)
	differs := false
	for i := range whole[0] {
		b := i / (len(whole[0]) / c.b)
		differs = differs || b == 2 && !sameBits(got[0][i], whole[0][i])
	}
	require.True(t, differs, "sequence 2 drawing sequence 0's mask")
}

// TestDropoutDeterminism: with dropout, the forward and the backward give
// the same bits whatever the worker count.
func TestDropoutDeterminism(t *testing.T) {
	w, m := window(30, 0, true)
	e := with(w, func(e *spec.Ext) {
		e.Softcap = 4
		e.Slopes = alibi(4)
		e.SeqUsedK = []int32{200, 260}
		e.Dropout = dropOf(0.2, 40)
	})
	c := tcase{b: 2, hq: 4, hkv: 2, nq: 300, nk: 260, d: 40, dv: 40, mask: m, layout: "bshd", ext: e}
	checkWorkerDeterminism(t, c)
	c.ext = &spec.Ext{Left: -1, Right: -1, Dropout: dropOf(0.6, 41)}
	checkWorkerDeterminism(t, c)

	p := c.problem()
	ops := layoutViews(p, c.layout)
	ops.setInputs(p, rand.New(rand.NewPCG(7, 8)), 2)
	var first []float32
	for _, workers := range []int{1, 2, 7} {
		lse := make([]float32, p.LSELen())
		require.NoError(t, ForwardWith(context.Background(), Config{Br: 32, Bc: 16, Workers: workers}, p,
			ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), lse))
		got := append(append([]float32(nil), ops.o.full...), lse...)
		if first == nil {
			first = got
			continue
		}
		for i := range got {
			require.True(t, sameBits(got[i], first[i]), "workers=%d: forward element %d: %v, want %v", workers, i, got[i], first[i])
		}
	}
}
