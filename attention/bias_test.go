package attention_test

import (
	"context"
	"math"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/x448/float16"
)

func TestKeepMask(t *testing.T) {
	s := attention.Shape{B: 1, S: 2, H: 1, D: 3}
	m, err := attention.KeepMask([]bool{true, false, true, false, false, true}, s, attention.BHSD, attention.Float16)
	require.NoError(t, err)
	want := []float32{0, float32(math.Inf(-1)), 0, float32(math.Inf(-1)), float32(math.Inf(-1)), 0}
	assert.Equal(t, want, m.Float32s())
	_, err = attention.KeepMask(make([]bool, 5), s, attention.BHSD, attention.Float32)
	assert.ErrorIs(t, err, attention.ErrLength)
	_, err = attention.KeepMask(nil, attention.Shape{}, attention.BHSD, attention.Float32)
	assert.ErrorIs(t, err, attention.ErrShape)
}

// TestBiasErrors: every bad bias, dBias or bias option is refused before
// anything runs, with an error wrapping the sentinel and naming the
// argument; nothing panics.
func TestBiasErrors(t *testing.T) {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	require.NoError(t, err)
	defer e.Close()
	ctx := context.Background()
	qs := attention.Shape{B: 2, S: 5, H: 4, D: 8}
	ks := attention.Shape{B: 2, S: 7, H: 2, D: 8}
	q, _ := attention.NewTensor(attention.Float16, qs, attention.BSHD)
	k, _ := attention.NewTensor(attention.Float16, ks, attention.BSHD)
	o, _ := attention.NewTensor(attention.Float16, qs, attention.BSHD)
	lse := make([]float32, 2*4*5)
	g := [3]attention.Tensor{}
	for i, s := range []attention.Shape{qs, ks, ks} {
		g[i], _ = attention.NewTensor(attention.Float16, s, attention.BSHD)
	}
	bs := attention.Shape{B: 1, S: 5, H: 4, D: 7}
	good, _ := attention.NewTensor(attention.Float32, bs, attention.BHSD)
	bias := func(t attention.Tensor) *attention.Bias { return &attention.Bias{Tensor: t} }
	tensor := func(dt attention.DType, s attention.Shape) attention.Tensor {
		x, _ := attention.NewTensor(dt, s, attention.BHSD)
		return x
	}
	dev, err := e.NewDeviceTensor(attention.Float32, bs, attention.BHSD)
	require.NoError(t, err)
	defer dev.Close()
	for _, c := range []struct {
		name   string
		bias   *attention.Bias
		want   error
		naming string
	}{
		{"no tensor", &attention.Bias{Device: dev}, attention.ErrOption, "Bias.Tensor"},
		{"batch", bias(tensor(attention.Float32, attention.Shape{B: 3, S: 5, H: 4, D: 7})), attention.ErrShape, "bias: batch 3"},
		{"rows", bias(tensor(attention.Float32, attention.Shape{B: 1, S: 4, H: 4, D: 7})), attention.ErrShape, "bias: 4 query rows"},
		{"heads", bias(tensor(attention.Float32, attention.Shape{B: 1, S: 5, H: 2, D: 7})), attention.ErrShape, "bias: 2 heads"},
		{"keys", bias(tensor(attention.Float32, attention.Shape{B: 1, S: 5, H: 4, D: 6})), attention.ErrShape, "bias: 6 keys"},
		{"dtype", bias(tensor(attention.BFloat16, bs)), attention.ErrDType, "bias: bfloat16"},
		{"short", bias(attention.Tensor{Shape: bs, Data: make([]float32, 10)}), attention.ErrLength, "bias"},
		{"data", bias(attention.Tensor{Shape: bs, Data: []int{1}}), attention.ErrDType, "bias"},
		{"strides", bias(attention.Tensor{Shape: bs, Strides: attention.Strides{Seq: -1}, Data: make([]float32, 200)}), attention.ErrStride, "bias"},
		{"grad without tensor", &attention.Bias{Tensor: good, Grad: true}, attention.ErrOption, "GradTensor"},
		{"grad shape", &attention.Bias{Tensor: good, Grad: true, GradTensor: tensor(attention.Float32, attention.Shape{B: 2, S: 5, H: 4, D: 7})},
			attention.ErrShape, "dbias: shape"},
		{"grad dtype", &attention.Bias{Tensor: good, Grad: true, GradTensor: tensor(attention.Float16, bs)}, attention.ErrDType, "dbias"},
		{"grad aliases bias", &attention.Bias{Tensor: good, Grad: true, GradTensor: good}, attention.ErrStride, "dbias"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opt := attention.Options{Bias: c.bias}
			var ferr, berr error
			assert.NotPanics(t, func() {
				ferr = e.ForwardInto(ctx, q, k, k, o, lse, opt)
				berr = e.BackwardInto(ctx, q, k, k, o, lse, o, g[0], g[1], g[2], opt)
			})
			if c.bias.Grad {
				assert.NoError(t, ferr, "a forward ignores Grad") // (and its dBias)
			} else {
				assert.ErrorIs(t, ferr, c.want)
				assert.ErrorContains(t, ferr, c.naming)
			}
			assert.ErrorIs(t, berr, c.want)
			assert.ErrorContains(t, berr, c.naming)
		})
	}

	// KV-cache calls refuse a bias.
	cache := &attention.KVCache{K: k, V: k, SeqLens: []int32{3, 4}}
	_, err = e.ForwardKVCache(ctx, q, cache, attention.Tensor{}, attention.Tensor{}, attention.Options{Bias: bias(good)})
	assert.ErrorIs(t, err, attention.ErrOption)
	assert.ErrorContains(t, err, "Bias")

	// DeviceTensor calls read Bias.Device, and refuse dBias aliasing it.
	dq, _ := e.NewDeviceTensor(attention.Float16, qs, attention.BSHD)
	dk, _ := e.NewDeviceTensor(attention.Float16, ks, attention.BSHD)
	dl, _ := e.NewDeviceTensor(attention.Float32, attention.LSEShape(2, 4, 5), attention.BHSD)
	for _, x := range []*attention.DeviceTensor{dq, dk, dl} {
		defer x.Close()
	}
	err = e.ForwardDevice(ctx, dq, dk, dk, dq, dl, attention.Options{Bias: bias(good)})
	assert.ErrorIs(t, err, attention.ErrOption)
	assert.ErrorContains(t, err, "Bias.Device")
	err = e.TrainStep(ctx, dq, dk, dk, dq, dq, dl, dq, dk, dk, attention.Options{Bias: &attention.Bias{Device: dev, Grad: true, GradDevice: dev}})
	assert.ErrorIs(t, err, attention.ErrOption)
}

// TestBiasBroadcastHost: a float16 bias broadcast over the batch and the
// heads gives the CPU backend's results for the same bias written out in
// full, and Backward allocates dBias in the
// bias's shape and dtype (the full bias's gradient summed over what the
// broadcast one folds).
func TestBiasBroadcastHost(t *testing.T) {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	require.NoError(t, err)
	defer e.Close()
	ctx := context.Background()
	qs := attention.Shape{B: 2, S: 6, H: 2, D: 4}
	q, _ := attention.NewTensor(attention.Float16, qs, attention.BSHD)
	do, _ := attention.NewTensor(attention.Float16, qs, attention.BSHD)
	for i := range qs.Len() {
		q.Data.([]float16.Float16)[i] = float16.Fromfloat32(float32(math.Sin(float64(i))))
		do.Data.([]float16.Float16)[i] = float16.Fromfloat32(float32(math.Cos(float64(3 * i))))
	}
	small, _ := attention.NewTensor(attention.Float16, attention.Shape{B: 1, S: 6, H: 1, D: 6}, attention.BHSD)
	for i := range 36 {
		small.Data.([]float16.Float16)[i] = float16.Fromfloat32(float32(i%5) - 2)
	}
	small.Data.([]float16.Float16)[7] = float16.Inf(-1)
	full, _ := attention.NewTensor(attention.Float16, attention.Shape{B: 2, S: 6, H: 2, D: 6}, attention.BHSD)
	for b := range 2 {
		for h := range 2 {
			copy(full.Data.([]float16.Float16)[(b*2+h)*36:], small.Data.([]float16.Float16))
		}
	}
	run := func(x attention.Tensor) ([]float32, []float32) {
		opt := attention.Options{Causal: true, Bias: &attention.Bias{Tensor: x, Grad: true}}
		out, err := e.Forward(ctx, q, q, q, opt)
		require.NoError(t, err)
		gr, err := e.Backward(ctx, q, q, q, out.O, out.LSE, do, opt)
		require.NoError(t, err)
		require.Equal(t, x.Shape, gr.DBias.Shape)
		require.Equal(t, x.DType(), gr.DBias.DType())
		return out.O.Float32s(), gr.DBias.Float32s()
	}
	o1, db1 := run(small)
	o2, db2 := run(full)
	assert.Equal(t, o2, o1)
	for i := range 36 {
		var sum float64 // (Float32s is BSHD: element (b, i, h, j))
		for b := range 2 {
			for h := range 2 {
				sum += float64(db2[((b*6+i/6)*2+h)*6+i%6])
			}
		}
		assert.InDelta(t, sum, float64(db1[i]), 2e-3*(1+math.Abs(sum)), "dbias element %d", i)
	}
	assert.Zero(t, db1[7], "dBias of a hidden key")
}
