package attention

import (
	"context"

	"github.com/flashvk/flashvk/internal/vkattn"
)

// Launch is one compute dispatch of the Vulkan backend: kernel, grid,
// workgroup size, tile and shared memory (see vkattn.Launch).
type Launch = vkattn.Launch

// Launches returns the dispatches the Vulkan backend records for the
// forward (or, with backward, the backward) of attention on contiguous
// tensors of shapes q, k, v in layout l and dtype dt with opt — the grids
// and tiles the kernels run with on this engine's device. It returns nil
// and no error on a backend other than Vulkan.
func (e *Engine) Launches(ctx context.Context, q, k, v Shape, l Layout, dt DType, opt Options, backward bool) ([]Launch, error) {
	vk := e.Vulkan()
	if vk == nil {
		return nil, nil
	}
	if err := e.supports(dt); err != nil {
		return nil, err
	}
	p, err := newProblem(q, k, v, Contiguous(q, l), Contiguous(k, l), Contiguous(v, l), opt)
	if err != nil {
		return nil, err
	}
	p.O = Contiguous(outShape(p), l)
	ls, err := vk.Launches(ctx, p, vkDType(dt), backward)
	if err != nil {
		return nil, vkErr(err)
	}
	return ls, nil
}
