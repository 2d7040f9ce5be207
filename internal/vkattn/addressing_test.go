//go:build cgo

package vkattn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/internal/device/devicetest"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/reference"
	"github.com/x448/float16"
)

// openAddressing opens a Backend with addressing a on the test device,
// failing when the device has no buffer device addresses (the path these
// tests exist for would go unchecked).
func openAddressing(t *testing.T, a Addressing) *Backend {
	t.Helper()
	dev := devicetest.Open(t)
	if in := dev.Info(); !in.BufferDeviceAddress || !in.Int64 {
		t.Fatalf("%s: no buffer device addresses (%v) or shaderInt64 (%v): the addressed kernels cannot be checked here",
			in.Name, in.BufferDeviceAddress, in.Int64)
	}
	return openBackendOn(t, dev, Options{Addressing: a})
}

// bigQueryProblem is a forward whose Q and O (float32, [1, Nq, 4, 16]) are
// 64 rows more than one binding reaches, with 32 keys and no mask (rows
// independent: sampled rows are checked against the reference): small
// work, an operand the bindings cannot hold.
func bigQueryProblem(b *Backend) *hostProblem {
	const h, d = 4, 16
	nq := int(b.BindingBytes()/(h*d*4)) + 64
	return newHostProblem(21, 1, h, h, nq, 32, d, d, spec.MaskNone)
}

// sampleRows returns the problem of rows [i0, i0+n) of the unmasked h
// (its Q rows and output slots), for a float64 reference of those rows.
func sampleRows(h *hostProblem, i0, n int) (p reference.Params, q []float64, o, lse []float32) {
	hp := h.p
	row := hp.Hq * hp.D
	p = h.ref()
	p.Nq = n
	q = to64(h.q[i0*row : (i0+n)*row])
	o = h.o[i0*hp.Hq*hp.Dv : (i0+n)*hp.Hq*hp.Dv]
	for hh := range hp.Hq {
		lse = append(lse, h.lse[hh*hp.Nq+i0:hh*hp.Nq+i0+n]...)
	}
	return p, q, o, lse
}

// TestAddressingChoice: Plan keeps bindings for problems whose operands
// fit one binding and gives a problem with a larger operand the addressed
// builds (only the oversized pass's storage operands by address, LSE
// bound), which compute it correctly; with addressing off the problem is
// refused naming the reason, and a tensor beyond a binding is refused.
func TestAddressingChoice(t *testing.T) {
	ctx := context.Background()
	b := openAddressing(t, AddressAuto)
	small := bshdProblem(1, 4, 4, 64, 64, 16)
	pl, err := b.Plan(ctx, small, spec.Float32, Fwd)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range pl.Launches {
		if len(l.Addresses) != 0 || strings.Contains(l.Kernel, ".addr") {
			t.Errorf("small problem: launch %s reads %v by address", l.Name(), l.Addresses)
		}
	}

	h := bigQueryProblem(b)
	pl, err = b.Plan(ctx, h.p, spec.Float32, Fwd)
	if err != nil {
		t.Fatal(err)
	}
	l := pl.Launches[0]
	if l.Kernel != "flash.addr" || len(l.Addresses) != 4 || l.Addresses[0] != OpQ || l.Addresses[3] != OpO {
		t.Fatalf("Nq %d: launch %s addresses %v, want flash.addr reading q, k, v, o by address", h.p.Nq, l.Name(), l.Addresses)
	}
	t.Logf("Nq %d (q %d bytes, one binding %d): %s, %v by address", h.p.Nq, int64(h.p.Nq)*4*16*4, b.BindingBytes(), l.Name(), l.Addresses)
	if n, err := b.MaxBatchChunk(ctx, h.p, spec.Float32, false); err != nil || n != 1 {
		t.Fatalf("MaxBatchChunk: %d, %v", n, err)
	}
	for i := range h.o {
		h.o[i] = float32(math.NaN())
	}
	if err := ForwardHost(ctx, b, h.p, h.q, h.k, h.v, h.o, h.lse, HostBias{}); err != nil {
		t.Fatal(err)
	}
	// The first rows, and the last ones, beyond one binding's reach.
	for _, i0 := range []int{0, h.p.Nq - 256} {
		rp, q, gotO, gotLSE := sampleRows(h, i0, 256)
		o, lse, err := reference.Forward(rp, q, to64(h.k), to64(h.v))
		if err != nil {
			t.Fatal(err)
		}
		checkClose(t, fmt.Sprintf("o rows %d…", i0), gotO, o, 1e-5)
		checkClose(t, fmt.Sprintf("lse rows %d…", i0), gotLSE, lse, 1e-5)
	}

	// The same problem with device addresses off.
	off := openAddressing(t, AddressBindings)
	_, err = off.Plan(ctx, h.p, spec.Float32, Fwd)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "device addresses are off") {
		t.Errorf("addressing off: %v", err)
	}
	if _, err := off.NewTensor(spec.Float32, spec.Shape{B: 1, S: h.p.Nq, H: 4, D: 16}, spec.Strides{}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("addressing off: a tensor beyond one binding: %v", err)
	}
	// With addresses such a tensor exists and runs resident.
	tq, err := b.NewTensor(spec.Float32, spec.Shape{B: 1, S: h.p.Nq, H: 4, D: 16}, spec.Strides{})
	if err != nil {
		t.Fatalf("a tensor beyond one binding: %v", err)
	}
	tq.Close()
}

// TestAddressedKernels runs every dtype's forward and backward on the
// addressed builds (AddressAlways) with batches, GQA, strides (BHSD Q)
// and both causal alignments, checks that they are bitwise the bindings
// builds' results (same arithmetic, other addressing) and, for float32
// BSHD, the float64 reference.
func TestAddressedKernels(t *testing.T) {
	ctx := context.Background()
	addr := openAddressing(t, AddressAlways)
	bound := openBackend(t, "")
	for i, c := range []hostCase{
		{2, 4, 2, 37, 45, 32, 32, spec.MaskCausalBottomRight},
		{1, 2, 1, 70, 33, 40, 24, spec.MaskCausalTopLeft},
		{2, 2, 2, 16, 80, 64, 64, spec.MaskNone},
	} {
		for _, dt := range addr.DTypes() {
			h := c.problem(uint64(40 + i))
			strided := i == 1
			if strided {
				h.p.Q = spec.BHSD(h.p.Nq, h.p.Hq, h.p.D) // Q (and dQ) in BHSD
			}
			pl, err := addr.Plan(ctx, h.p, dt, Bwd)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range pl.Launches {
				if len(l.Addresses) == 0 {
					t.Fatalf("%v %s: launch %s reads no operand by address", dt, c.name(i), l.Name())
				}
			}
			outs := map[*Backend][][]float32{}
			for _, b := range []*Backend{addr, bound} {
				o, lse, dq, dk, dv := hostRun(t, ctx, b, h, dt)
				outs[b] = [][]float32{o, lse, dq, dk, dv}
			}
			names := []string{"o", "lse", "dq", "dk", "dv"}
			for j := range names {
				if !bitsEqual(outs[addr][j], outs[bound][j]) {
					t.Errorf("%v %s: %s differs between the addressed and the bound kernels", dt, c.name(i), names[j])
				}
			}
			if dt == spec.Float32 && !strided { // (the reference reads BSHD)
				o, lse, err := reference.Forward(h.ref(), to64(h.q), to64(h.k), to64(h.v))
				if err != nil {
					t.Fatal(err)
				}
				checkClose(t, c.name(i)+" o", outs[addr][0], o, 1e-5)
				checkClose(t, c.name(i)+" lse", outs[addr][1], lse, 1e-5)
				dq, dk, dv, err := reference.Backward(h.ref(), to64(h.q), to64(h.k), to64(h.v), to64(h.dO))
				if err != nil {
					t.Fatal(err)
				}
				checkClose(t, c.name(i)+" dq", outs[addr][2], dq, 1e-5)
				checkClose(t, c.name(i)+" dk", outs[addr][3], dk, 1e-5)
				checkClose(t, c.name(i)+" dv", outs[addr][4], dv, 1e-5)
			}
		}
	}
}

// hostRun runs the forward and backward of h on b in storage dt (inputs
// rounded to dt) and returns O, LSE, dQ, dK, dV as float32.
func hostRun(t *testing.T, ctx context.Context, b *Backend, h *hostProblem, dt spec.DType) (o, lse, dq, dk, dv []float32) {
	t.Helper()
	switch dt {
	case spec.Float16:
		return hostRunAs(t, ctx, b, h, float16.Fromfloat32, float16.Float16.Float32)
	case spec.BFloat16:
		return hostRunAs(t, ctx, b, h, bfloat16.FromFloat32, bfloat16.BFloat16.Float32)
	}
	return hostRunAs(t, ctx, b, h, func(x float32) float32 { return x }, func(x float32) float32 { return x })
}

// hostRunAs is hostRun with storage T: inputs converted by from, outputs
// back by to.
func hostRunAs[T Elem](t *testing.T, ctx context.Context, b *Backend, h *hostProblem, from func(float32) T, to func(T) float32) (o, lse, dq, dk, dv []float32) {
	t.Helper()
	conv := func(x []float32) []T { return mapped(x, from) }
	back := func(x []T) []float32 { return mapped(x, to) }
	q, k, v, do := conv(h.q), conv(h.k), conv(h.v), conv(h.dO)
	ot, dqt, dkt, dvt := make([]T, len(h.o)), make([]T, len(h.dq)), make([]T, len(h.dk)), make([]T, len(h.dv))
	lse = make([]float32, len(h.lse))
	if err := ForwardHost(ctx, b, h.p, q, k, v, ot, lse, HostBias{}); err != nil {
		t.Fatal(err)
	}
	if err := BackwardHost(ctx, b, h.p, q, k, v, ot, lse, do, dqt, dkt, dvt, HostBias{}); err != nil {
		t.Fatal(err)
	}
	return back(ot), lse, back(dqt), back(dkt), back(dvt)
}

// mapped is f of every element of x.
func mapped[T, U any](x []T, f func(T) U) []U {
	out := make([]U, len(x))
	for i, v := range x {
		out[i] = f(v)
	}
	return out
}
