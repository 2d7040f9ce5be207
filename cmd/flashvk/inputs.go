package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/bfloat16"
	"github.com/x448/float16"
)

// randomTensor draws a tensor of standard normal values (rounded to the
// dtype) stored densely in layout l.
func randomTensor(dt attention.DType, s attention.Shape, l attention.Layout, rng *rand.Rand) attention.Tensor {
	t, _ := randomTensorCtx(context.Background(), dt, s, l, rng)
	return t
}

// randomTensorCtx is randomTensor, stopping with ctx's error once ctx is
// done (large inputs take seconds to draw).
func randomTensorCtx(ctx context.Context, dt attention.DType, s attention.Shape, l attention.Layout, rng *rand.Rand) (attention.Tensor, error) {
	n := s.Len()
	// fill draws the n values in chunks, checking ctx between them.
	fill := func(set func(i int, v float32)) error {
		for i := 0; i < n; i++ {
			if i%(1<<16) == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			set(i, float32(rng.NormFloat64()))
		}
		return nil
	}
	switch dt {
	case attention.Float16:
		x := make([]float16.Float16, n)
		err := fill(func(i int, v float32) { x[i] = float16.Fromfloat32(v) })
		return attention.FromFloat16(x, s, l), err
	case attention.BFloat16:
		x := make([]bfloat16.BFloat16, n)
		err := fill(func(i int, v float32) { x[i] = bfloat16.FromFloat32(v) })
		return attention.FromBFloat16(x, s, l), err
	}
	x := make([]float32, n)
	err := fill(func(i int, v float32) { x[i] = v })
	return attention.FromFloat32(x, s, l), err
}

// rngFor returns an independent stream for one operand of a seed.
func rngFor(seed uint64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream*0x9e3779b97f4a7c15+1))
}

// dims returns the .npy shape of a tensor stored in layout l.
func dims(s attention.Shape, l attention.Layout) []int {
	if l == attention.BHSD {
		return []int{s.B, s.H, s.S, s.D}
	}
	return []int{s.B, s.S, s.H, s.D}
}

// shapeOf interprets a 4-D .npy shape in layout l.
func shapeOf(d []int, l attention.Layout) attention.Shape {
	if l == attention.BHSD {
		return attention.Shape{B: d[0], H: d[1], S: d[2], D: d[3]}
	}
	return attention.Shape{B: d[0], S: d[1], H: d[2], D: d[3]}
}

// saveTensor writes t as the .npy file dir/name in layout l (see npyOf),
// all or nothing.
func saveTensor(dir, name string, t attention.Tensor, l attention.Layout) error {
	shape, data := npyOf(t, l)
	return writeNpy(filepath.Join(dir, name), shape, data)
}

// npyOf is the .npy shape and data of t in layout l (converted when t is
// stored otherwise). bfloat16 tensors are written as float32 (exact: numpy
// has no bfloat16).
func npyOf(t attention.Tensor, l attention.Layout) ([]int, any) {
	if t.Strides == attention.Contiguous(t.Shape, l) {
		return dims(t.Shape, l), t.Data
	}
	// Not dense in l: repack through a BSHD float32 copy.
	f := t.Float32s()
	dense := attention.FromFloat32(f, t.Shape, attention.BSHD)
	if l == attention.BHSD {
		out := make([]float32, len(f))
		s := t.Shape
		for b := range s.B {
			for i := range s.S {
				for h := range s.H {
					copy(out[((b*s.H+h)*s.S+i)*s.D:][:s.D], f[((b*s.S+i)*s.H+h)*s.D:][:s.D])
				}
			}
		}
		dense = attention.FromFloat32(out, s, l)
	}
	if t.DType() == attention.Float16 {
		src := dense.Data.([]float32)
		h := make([]float16.Float16, len(src))
		for i, v := range src {
			h[i] = float16.Fromfloat32(v)
		}
		return dims(t.Shape, l), h
	}
	return dims(t.Shape, l), dense.Data // float32 for float32 and bfloat16
}

// inputFiles are the .npy files of --q, --k, --v (and --do), their headers
// read and checked against each other: the problem's sizes, known before
// any data is read.
type inputFiles struct {
	q, k, v, do *npyHead // do nil without --do
	layout      attention.Layout
}

// inspectInputs reads the headers of --q/--k/--v[/--do] in layout l and
// derives the problem sizes from them. Every error names the offending
// file. Each file is opened under ctx: a file that blocks (a FIFO with no
// writer) stops with ctx's error once ctx is done.
func inspectInputs(ctx context.Context, qp, kp, vp, dop string, l attention.Layout) (*inputFiles, problem, error) {
	var p problem
	head := func(path, what string) (*npyHead, attention.Shape, error) {
		h, err := await(ctx, func() (*npyHead, error) { return statNpy(path) })
		if err != nil {
			return nil, attention.Shape{}, err
		}
		if len(h.Shape) != 4 {
			return nil, attention.Shape{}, fmt.Errorf("%s: %s has shape %v, want 4 dimensions %s", path, what, h.Shape, layoutDims(l))
		}
		for _, d := range h.Shape {
			if d <= 0 {
				return nil, attention.Shape{}, fmt.Errorf("%s: %s has shape %v: every dimension must be positive", path, what, h.Shape)
			}
		}
		return h, shapeOf(h.Shape, l), nil
	}
	in := &inputFiles{layout: l}
	var qs, ks, vs attention.Shape
	var err error
	if in.q, qs, err = head(qp, "q"); err != nil {
		return nil, p, err
	}
	if in.k, ks, err = head(kp, "k"); err != nil {
		return nil, p, err
	}
	if in.v, vs, err = head(vp, "v"); err != nil {
		return nil, p, err
	}
	qa, ka, va := in.q, in.k, in.v
	for _, x := range []*npyHead{ka, va} {
		if x.DType != qa.DType {
			return nil, p, fmt.Errorf("%s: dtype %s differs from %s's %s", x.path, x.DType, qp, qa.DType)
		}
	}
	switch {
	case ks.B != qs.B:
		return nil, p, fmt.Errorf("%s: batch %d ≠ %s's %d (shapes %v and %v, layout %s)", kp, ks.B, qp, qs.B, ka.Shape, qa.Shape, l)
	case vs.B != qs.B:
		return nil, p, fmt.Errorf("%s: batch %d ≠ %s's %d (shapes %v and %v, layout %s)", vp, vs.B, qp, qs.B, va.Shape, qa.Shape, l)
	case ks.D != qs.D:
		return nil, p, fmt.Errorf("%s: head dim %d ≠ %s's %d (shapes %v and %v, layout %s)", kp, ks.D, qp, qs.D, ka.Shape, qa.Shape, l)
	case qs.H%ks.H != 0:
		return nil, p, fmt.Errorf("%s: %d kv heads do not divide %s's %d query heads (shapes %v and %v, layout %s)", kp, ks.H, qp, qs.H, ka.Shape, qa.Shape, l)
	case vs.S != ks.S:
		return nil, p, fmt.Errorf("%s: sequence length %d ≠ %s's %d (shapes %v and %v, layout %s)", vp, vs.S, kp, ks.S, va.Shape, ka.Shape, l)
	case vs.H != ks.H:
		return nil, p, fmt.Errorf("%s: %d heads ≠ %s's %d (shapes %v and %v, layout %s)", vp, vs.H, kp, ks.H, va.Shape, ka.Shape, l)
	case qs.D > attention.MaxHeadDim || vs.D > attention.MaxHeadDim:
		return nil, p, fmt.Errorf("%s: head dim larger than %d", qp, attention.MaxHeadDim)
	}
	p = problem{B: qs.B, Hq: qs.H, Hkv: ks.H, Nq: qs.S, Nk: ks.S, D: qs.D, Dv: vs.D, DType: qa.DType, Layout: l}
	if dop != "" {
		do, ds, err := head(dop, "do")
		if err != nil {
			return nil, p, err
		}
		if do.DType != qa.DType {
			return nil, p, fmt.Errorf("%s: dtype %s differs from %s's %s", dop, do.DType, qp, qa.DType)
		}
		if ds != p.oShape() {
			return nil, p, fmt.Errorf("%s: shape %v, want O's %v (layout %s)", dop, do.Shape, dims(p.oShape(), l), l)
		}
		in.do = do
	}
	return in, p, nil
}

// read reads the files' data (dO's zero without --do); with bf16, float32
// data is rounded to bfloat16 (numpy has no bfloat16). It stops with ctx's
// error once ctx is done.
func (in *inputFiles) read(ctx context.Context, bf16 bool) (q, k, v, do attention.Tensor, err error) {
	load := func(h *npyHead) (attention.Tensor, error) {
		if h == nil {
			return attention.Tensor{}, nil
		}
		a, err := await(ctx, h.read)
		if err != nil {
			return attention.Tensor{}, err
		}
		s := shapeOf(a.Shape, in.layout)
		t := attention.Tensor{Shape: s, Strides: attention.Contiguous(s, in.layout), Data: a.Data}
		if bf16 {
			t = roundToBFloat16(t)
		}
		return t, nil
	}
	var ts [4]attention.Tensor
	for i, h := range []*npyHead{in.q, in.k, in.v, in.do} {
		if ts[i], err = load(h); err != nil {
			return q, k, v, do, err
		}
	}
	return ts[0], ts[1], ts[2], ts[3], nil
}

func layoutDims(l attention.Layout) string {
	if l == attention.BHSD {
		return "[B, H, S, D] (--layout bhsd)"
	}
	return "[B, S, H, D] (--layout bshd)"
}

// roundToBFloat16 returns a float32 tensor's values rounded to bfloat16
// (nearest even), with t's shape and strides: how run reads float32 .npy
// files for --dtype bf16 (numpy has no bfloat16).
func roundToBFloat16(t attention.Tensor) attention.Tensor {
	src, ok := t.Data.([]float32)
	if !ok {
		return t
	}
	return attention.Tensor{Shape: t.Shape, Strides: t.Strides, Data: bfloat16.Slice(src)}
}
