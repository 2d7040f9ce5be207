//go:build cgo

package vkattn

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/flashvk/flashvk/internal/spec"
	"github.com/x448/float16"
)

// TestBeyondOneBinding runs a float16 forward and backward whose K, V, dK
// and dV are each larger than one binding reaches (on NVIDIA: > 4 GiB, >
// 2^31 elements) through the addressed kernels, and checks rows of O, LSE
// and dQ and the keys that matter of dK and dV (among them keys beyond the
// binding's reach) against float64 sums over all keys. It needs a GPU with bindings of at least 1 GiB and device
// memory for the four operands (lavapipe's 128 MiB case is
// TestAddressingChoice's); with -short it is skipped.
func TestBeyondOneBinding(t *testing.T) {
	if testing.Short() {
		t.Skip("several GiB of operands: skipped with -short")
	}
	b := openAddressing(t, AddressAuto)
	if !slices.Contains(b.DTypes(), spec.Float16) {
		t.Skipf("%s has no float16 storage", b.Info().Name)
	}
	if b.BindingBytes() < 1<<30 {
		t.Skipf("%s: one binding reaches %d bytes; this test is for GPUs (TestAddressingChoice covers small bindings)", b.Info().Name, b.BindingBytes())
	}
	const hkv, d = 2, 128
	beyond := int(b.BindingBytes()/(hkv*d*2)) + 4096
	if need := 4*int64(beyond)*hkv*d*2 + 1<<30; b.Info().DeviceLocalBytes() < uint64(need) {
		t.Skipf("%s: %d bytes of device memory, the test needs %d", b.Info().Name, b.Info().DeviceLocalBytes(), need)
	}
	// The same check with 2^20 keys (bound: the kernels every problem that
	// fits runs) tells the addressed build's error from the arithmetic's.
	// 2^20 keys through the bindings and through device addresses give
	// the same bits; then keys beyond one binding.
	var bound, addressed [][]float16.Float16
	t.Run("bound", func(t *testing.T) { bound = checkLongKeys(t, b, 1<<20, false) })
	t.Run("addressed", func(t *testing.T) { addressed = checkLongKeys(t, openAddressing(t, AddressAlways), 1<<20, true) })
	for i, name := range []string{"o", "dq", "dk", "dv"} {
		if len(bound) == 4 && len(addressed) == 4 && !slices.Equal(bound[i], addressed[i]) {
			t.Errorf("2^20 keys: %s differs between the bound and the addressed kernels", name)
		}
	}
	t.Run("beyond", func(t *testing.T) { checkLongKeys(t, b, beyond, true) })
}

// checkLongKeys runs the float16 forward and backward of 64 queries
// (Hq 4) over nk keys (Hkv 2, d 128) on b, checking that its kernels read
// operands by address when addressed (and not otherwise), compares against
// float64 sums, and returns O, dQ, dK and dV.
func checkLongKeys(t *testing.T, b *Backend, nk int, addressed bool) [][]float16.Float16 {
	ctx := context.Background()
	const hq, hkv, d, nq = 4, 2, 128, 64
	kvBytes := int64(nk) * hkv * d * 2
	p := &spec.Problem{B: 1, Hq: hq, Hkv: hkv, Nq: nq, Nk: nk, D: d, Dv: d, Scale: float32(1 / math.Sqrt(d)),
		Q: spec.BSHD(nq, hq, d), K: spec.BSHD(nk, hkv, d), V: spec.BSHD(nk, hkv, d), O: spec.BSHD(nq, hq, d)}
	for _, dir := range []Dir{Fwd, Bwd} {
		pl, err := b.Plan(ctx, p, spec.Float16, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range pl.Launches {
			if (len(l.Addresses) > 0) != addressed {
				t.Fatalf("%v: %s reads %v by address; k spans %d bytes, one binding reaches %d", dir, l.Name(), l.Addresses, kvBytes, b.BindingBytes())
			}
			t.Logf("%v: %s, %v by address", dir, l.Name(), l.Addresses)
		}
	}
	// Every query is u plus a little noise, and four "hot" keys of each
	// key/value head are 5u plus their own noise, near the end (where
	// K's last 4096 rows lie beyond one binding's reach: three of them
	// there): the softmax puts almost all weight on them, so the outputs
	// are O(1) (not averages over millions of keys, which float16 cannot
	// store accurately) and wrong addressing changes them grossly. (Hot
	// keys early in a long sequence would also measure the matrix units'
	// accumulation over the ~2^18 key tiles after them: bench/NOTES.md.)
	q, k, v, do := randHalf(1, nq*hq*d), randHalf(2, nk*hkv*d), randHalf(3, nk*hkv*d), randHalf(4, nq*hq*d)
	u := randHalf(5, d)
	for i := range q {
		q[i] = float16.Fromfloat32(u[i%d].Float32() + 0.1*q[i].Float32())
	}
	hot := []int{nk - 4100, nk - 4096, nk - 2000, nk - 2}
	for i, j := range hot {
		w := randHalf(uint64(6+i), d)
		for h := range hkv {
			for c := range d {
				k[(j*hkv+h)*d+c] = float16.Fromfloat32(5*u[c].Float32() + 0.3*w[c].Float32())
			}
		}
	}
	o, lse := make([]float16.Float16, nq*hq*d), make([]float32, hq*nq)
	dq, dk, dv := make([]float16.Float16, nq*hq*d), make([]float16.Float16, nk*hkv*d), make([]float16.Float16, nk*hkv*d)
	if err := ForwardHost(ctx, b, p, q, k, v, o, lse, HostBias{}); err != nil {
		t.Fatal(err)
	}
	if err := BackwardHost(ctx, b, p, q, k, v, o, lse, do, dq, dk, dv, HostBias{}); err != nil {
		t.Fatal(err)
	}
	// The float64 sums, for query heads 0 and 1 (key/value head 0, whose
	// K and V rows are first widened to float32 once).
	f := func(x []float16.Float16, i int) float64 { return float64(x[i].Float32()) }
	k0, v0 := headRows(k, nk, hkv, d), headRows(v, nk, hkv, d)
	type row struct{ lse, di float64 }
	ref := map[[2]int]row{} // (head, query row) → LSE and D = rowsum(dO∘O)
	var mu sync.Mutex
	// Fixed positions: o [head][row][c], lse [head][row], dq [head][row/21][c].
	gotO, wantO := make([]float64, 2*nq*d), make([]float64, 2*nq*d)
	gotLSE, wantLSE := make([]float64, 2*nq), make([]float64, 2*nq)
	gotDQ, wantDQ := make([]float64, 2*4*d), make([]float64, 2*4*d)
	parallel(2*nq, func(n int) {
		h, i := n/nq, n%nq
		qi, doi := make([]float64, d), make([]float64, d)
		for c := range d {
			qi[c], doi[c] = f(q, (i*hq+h)*d+c), f(do, (i*hq+h)*d+c)
		}
		m := math.Inf(-1)
		s := make([]float64, nk)
		for j := range nk {
			kj := k0[j*d : (j+1)*d]
			for c, x := range kj {
				s[j] += qi[c] * float64(x)
			}
			s[j] *= float64(p.Scale)
			m = max(m, s[j])
		}
		sum, acc := 0.0, make([]float64, d)
		for j := range nk {
			e := math.Exp(s[j] - m)
			sum += e
			for c, x := range v0[j*d : (j+1)*d] {
				acc[c] += e * float64(x)
			}
		}
		l := m + math.Log(sum)
		di := 0.0
		for c := range d {
			acc[c] /= sum
			di += doi[c] * acc[c]
		}
		var dqs []float64
		if i%21 == 0 { // dQ of rows 0, 21, 42, 63: one more pass each
			dqs = make([]float64, d)
			for j := range nk {
				dp := 0.0
				for c, x := range v0[j*d : (j+1)*d] {
					dp += doi[c] * float64(x)
				}
				ds := math.Exp(s[j]-l) * (dp - di)
				for c, x := range k0[j*d : (j+1)*d] {
					dqs[c] += ds * float64(x)
				}
			}
		}
		mu.Lock()
		ref[[2]int{h, i}] = row{l, di}
		mu.Unlock()
		gotLSE[n], wantLSE[n] = float64(lse[h*nq+i]), l
		for c := range d {
			gotO[n*d+c], wantO[n*d+c] = f(o, (i*hq+h)*d+c), acc[c]
			if dqs != nil {
				gotDQ[(h*4+i/21)*d+c], wantDQ[(h*4+i/21)*d+c] = f(dq, (i*hq+h)*d+c), dqs[c]*float64(p.Scale)
			}
		}
	})
	// dK and dV of the hot keys of head 0 (the others' are below float16's
	// normal range): sums over the two query heads and all rows.
	var gotDK, wantDK, gotDV, wantDV []float64
	for _, j := range hot {
		dkj, dvj := make([]float64, d), make([]float64, d)
		for h := range 2 {
			for i := range nq {
				r := ref[[2]int{h, i}]
				sc, dp := 0.0, 0.0
				for c := range d {
					sc += f(q, (i*hq+h)*d+c) * float64(k0[j*d+c])
					dp += f(do, (i*hq+h)*d+c) * float64(v0[j*d+c])
				}
				pij := math.Exp(sc*float64(p.Scale) - r.lse)
				for c := range d {
					dvj[c] += pij * f(do, (i*hq+h)*d+c)
					dkj[c] += pij * (dp - r.di) * f(q, (i*hq+h)*d+c) * float64(p.Scale)
				}
			}
		}
		for c := range d {
			gotDK, wantDK = append(gotDK, f(dk, (j*hkv)*d+c)), append(wantDK, dkj[c])
			gotDV, wantDV = append(gotDV, f(dv, (j*hkv)*d+c)), append(wantDV, dvj[c])
		}
	}
	// Which mix of the hot keys' V rows is row 0 of head 0 (least squares,
	// kernel and reference)?
	var vh [][]float64
	for _, j := range hot {
		r := make([]float64, d)
		for c := range d {
			r[c] = float64(v0[j*d+c])
		}
		vh = append(vh, r)
	}
	t.Logf("o row 0 = Σ a·V(hot): kernel a = %.5f, reference a = %.5f", mixOf(gotO[:d], vh), mixOf(wantO[:d], vh))
	// float16 storage of Nk-long sums: a sanity bound, not the conformance
	// rule (the suite checks the kernels' accuracy on smaller problems).
	for _, c := range []struct {
		name      string
		got, want []float64
	}{{"o", gotO, wantO}, {"lse", gotLSE, wantLSE}, {"dq", gotDQ, wantDQ}, {"dk", gotDK, wantDK}, {"dv", gotDV, wantDV}} {
		rel := relL2(c.got, c.want)
		worst, at := 0.0, 0
		for i := range c.got {
			if e := math.Abs(c.got[i] - c.want[i]); e > worst {
				worst, at = e, i
			}
		}
		t.Logf("%s: rel_l2 %.3g over %d sampled values; worst |error| %.3g (got %.6g want %.6g)",
			c.name, rel, len(c.got), worst, c.got[at], c.want[at])
		if !(rel <= 1e-2) {
			t.Errorf("%s: rel_l2 %.3g > 1e-2", c.name, rel)
		}
	}
	return [][]float16.Float16{o, dq, dk, dv}
}

// mixOf returns the least-squares coefficients a of x ≈ Σ a_k rows_k.
func mixOf(x []float64, rows [][]float64) []float64 {
	n := len(rows)
	m := make([][]float64, n) // normal equations [RRᵀ | Rx]
	for i := range n {
		m[i] = make([]float64, n+1)
		for j := range n {
			for c := range x {
				m[i][j] += rows[i][c] * rows[j][c]
			}
		}
		for c := range x {
			m[i][n] += rows[i][c] * x[c]
		}
	}
	for i := range n { // Gauss–Jordan, no pivoting (the rows are independent)
		for j := range n {
			if j != i {
				f := m[j][i] / m[i][i]
				for k := range n + 1 {
					m[j][k] -= f * m[i][k]
				}
			}
		}
	}
	a := make([]float64, n)
	for i := range n {
		a[i] = m[i][n] / m[i][i]
	}
	return a
}

// randHalf returns n float16 values uniform in [-1, 1) from seed, filled
// in parallel (the operands here hold billions of elements).
func randHalf(seed uint64, n int) []float16.Float16 {
	x := make([]float16.Float16, n)
	const block = 1 << 22
	parallel((n+block-1)/block, func(i int) {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		for j := i * block; j < min(n, (i+1)*block); j++ {
			x[j] = float16.Fromfloat32(2*rng.Float32() - 1)
		}
	})
	return x
}

// headRows returns head 0 of x ([nk, h, d] float16) as float32 rows.
func headRows(x []float16.Float16, nk, h, d int) []float32 {
	out := make([]float32, nk*d)
	const block = 1 << 16
	parallel((nk+block-1)/block, func(i int) {
		for j := i * block; j < min(nk, (i+1)*block); j++ {
			for c := range d {
				out[j*d+c] = x[(j*h)*d+c].Float32()
			}
		}
	})
	return out
}

// parallel runs fn(0 … n−1) on GOMAXPROCS goroutines.
func parallel(n int, fn func(int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
