//go:build cgo

package vkattn

// The kernel plan: which kernels, tiles and pipelines run a problem. Every
// choice is made by Backend.Plan (the chain of kernel families the
// Backend's Options.Kernel selects, each family's plan function); the
// recorder, Launches (explain), the benchmarks' per-kernel labels and the
// tuner all read its result. A family is one file (fam_*.go) and one line
// of registry.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/pipeline"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

// Dir is a pass: forward or backward.
type Dir uint8

const (
	// Fwd computes O and LSE.
	Fwd Dir = iota
	// Bwd computes dQ, dK and dV.
	Bwd
	// KV is a KV-cache call (spec.Problem.KV): the append, then O and LSE.
	KV
)

// dirNames are the tune cache's spellings of the passes.
var dirNames = [...]string{Fwd: "fwd", Bwd: "bwd", KV: "kv"}

// String is "fwd" or "bwd" (the tune cache's spelling).
func (d Dir) String() string {
	if int(d) < len(dirNames) {
		return dirNames[d]
	}
	return fmt.Sprintf("Dir(%d)", d)
}

// Operand names a buffer a dispatch binds: the call's operands, and the
// scratch buffers a plan allocates (OpD, OpScores).
type Operand uint8

const (
	OpQ Operand = iota
	OpK
	OpV
	OpO
	OpLSE // float32 [B, Hq, Nq]
	OpDO
	OpDQ
	OpDK
	OpDV
	OpD         // scratch: the backward's float32 D = rowsum(dO∘O), [B, Hq, Nq]
	OpScores    // scratch: the naive kernel's float32 scores, [B, Hq, Nq, Nk]
	OpNewK      // KV-cache calls: the rows appended to the cache K
	OpNewV      // and V
	OpMeta      // scratch: uint32 lengths and page table, written by the call
	OpPart      // scratch: decode's float32 per-split partial results
	OpExt       // scratch: the Ext buffer (shaders.ExtWords), written by the call
	OpBias      // the additive bias (spec.Bias), float32 or the storage type
	OpDBias     // its gradient, written by the backward (spec.Bias.Grad)
	OpBiasSum   // scratch: the bias's per-block summary (shaders.BiasSumWords)
	OpDBiasAcc  // scratch: float32 dS of one chunk of (b, h) planes of a dBias that folds (shaders.DSChunks)
	OpDBiasPart // scratch: float32 partial sums of such a dBias between chunks (dBias's element offsets)
	numOperands
)

var operandNames = [numOperands]string{"q", "k", "v", "o", "lse", "do", "dq", "dk", "dv", "D", "scores", "newk", "newv", "meta", "partials", "ext",
	"bias", "dbias", "biassum", "dbiasacc", "dbiaspart"}

func (o Operand) String() string {
	if o < numOperands {
		return operandNames[o]
	}
	return fmt.Sprintf("Operand(%d)", uint8(o))
}

// Launch is one dispatch of a plan.
type Launch struct {
	// Family is the kernel family that planned it ("flash_cm", "bwd", …).
	Family string
	// Kernel is the SPIR-V module ("bwd_cm_dkdv") and DType its storage
	// type.
	Kernel string
	DType  spec.DType
	// Tunable is the tune family whose configuration Config is ("" when
	// the launch has no tunable configuration); Source says where Config
	// came from: SourceTuned (the tune cache) or SourceDefault.
	Tunable, Config, Source string
	// Grid is the number of workgroups in x, y, z; Workgroup the
	// invocations per workgroup (x; y = z = 1). Base is the first
	// workgroup (gl_WorkGroupID counts from it): zero unless the launch
	// runs a part of a larger grid (the chunks of a folding dBias).
	Grid, Base [3]uint32
	Workgroup  int
	// BR and BC are the query and key rows of a tile (0 where the kernel
	// has no tile), SharedBytes the shared memory per workgroup.
	BR, BC      int
	SharedBytes int
	// Bindings are the buffers bound, in binding order.
	Bindings []Operand
	// Addresses are the operands an addressed build reads through their
	// buffer device addresses instead of its bindings, in push-constant
	// slot order (nil: every operand is read through its binding).
	Addresses []Operand
	// Barrier: a compute barrier precedes the dispatch.
	Barrier bool
	// Zero are buffers the launch's first workgroups find zeroed (filled
	// before it: a dBias or its scratch, of which the kernel writes only
	// what its tiles reach).
	Zero []Operand
	// HeadGroup > 1: the workgroups of HeadGroup consecutive heads of one
	// tile run one after another (the coopmat kernels, with a bias
	// broadcast over heads: headGroup), where 0 runs a head's tiles first.
	HeadGroup int

	key pipeline.Key // SPIR-V, specialization, bindings, subgroup settings
}

// Name is the pipeline's name: kernel, dtype, configuration and head
// dims (benchmarks label per-kernel times with it).
func (l *Launch) Name() string { return l.key.Name }

// Plan is how one pass of one problem runs.
type Plan struct {
	Dir Dir
	// Family is the family that runs the pass.
	Family string
	// Launches are the dispatches, in recording order.
	Launches []Launch
	// Scratch are the bytes of each scratch buffer (OpD, OpScores) the
	// launches bind.
	Scratch map[Operand]int64
	// Declined says why the families tried before Family did not run the
	// problem (one line each, "family: reason").
	Declined []string

	decode *DecodeConfig    // the KV family's configuration (its push constants)
	ds     shaders.DSChunks // how a folding dBias's dS scratch is used (zero without)
}

// Decode is the KV family's configuration of the plan (nil for other
// passes).
func (pl *Plan) Decode() *DecodeConfig { return pl.decode }

// family is a way to compute one pass: its kernels, what it needs of the
// device and the problem, its tile rule and its tunable stages.
type family struct {
	name string
	dir  Dir
	// auto: part of the default chain ("" kernel selection).
	auto bool
	// ext: the family runs problems with spec.Ext (its kernels are
	// shaders.ExtKernels, or need no mask); the others decline them.
	ext bool
	// backward: for a forward family selected by name, the backward
	// families that run with it, in order of preference.
	backward []string
	// init prepares the family's per-Backend state at Open and says why
	// it cannot run on the device at all ("" when it can); explicit says
	// the user selected it by name (then a device that cannot run it is
	// an error).
	init func(b *Backend, explicit bool) (string, error)
	// whyFor, where set, says why the family cannot run storage dt on the
	// device at all (init's answer is for the device, whatever the
	// storage): Plan's declined reasons take it.
	whyFor func(b *Backend, dt spec.DType) string
	// plan returns the launches and scratch of p with storage dt, or an
	// error saying why the family does not run it here.
	plan func(ctx context.Context, b *Backend, p *spec.Problem, dt spec.DType) (*Plan, error)
	// tunables are the stages the tuner may configure.
	tunables []*Tunable
}

// registry lists every kernel family; the default chains take the auto
// families in this order. (Set in init: the families' functions read it.)
var registry []*family

func init() {
	registry = []*family{
		flashCMFamily,
		flashFamily,
		minimalFamily,
		naiveFamily,
		bwdCMFamily,
		bwdFamily,
		decodeFamily,
	}
}

func familyByName(name string) *family {
	for _, f := range registry {
		if f.name == name {
			return f
		}
	}
	return nil
}

// ForwardKernels lists the names Options.Kernel accepts.
func ForwardKernels() []string {
	var ks []string
	for _, f := range registry {
		if f.dir == Fwd {
			ks = append(ks, f.name)
		}
	}
	return ks
}

// checkKernel refuses a kernel selection no forward family answers to.
func checkKernel(kernel string) error {
	if f := familyByName(kernel); kernel != "" && (f == nil || f.dir != Fwd) {
		return fmt.Errorf("%w: kernel %q (want one of %s)", ErrInvalid, kernel, strings.Join(ForwardKernels(), ", "))
	}
	return nil
}

// initChains builds the Backend's family chains from Options.Kernel and runs
// each family's init. With a named kernel its family alone runs the
// forward (its errors are returned, never another kernel's results) and
// its backward families the backward; with "" the auto families run in
// registry order, the first that takes a problem winning.
func (b *Backend) initChains(kernel string) error {
	var fwd, bwd, kv []*family
	for _, f := range registry {
		if f.dir == KV {
			kv = append(kv, f) // whatever forward kernel was selected
		}
	}
	if kernel == "" {
		for _, f := range registry {
			if f.auto && f.dir == Fwd {
				fwd = append(fwd, f)
			} else if f.auto && f.dir == Bwd {
				bwd = append(bwd, f)
			}
		}
	} else {
		if err := checkKernel(kernel); err != nil {
			return err
		}
		f := familyByName(kernel)
		fwd = []*family{f}
		for _, n := range f.backward {
			bwd = append(bwd, familyByName(n))
		}
		b.explicit = f
	}
	b.unavail = map[*family]string{}
	for _, f := range append(append(append([]*family(nil), fwd...), bwd...), kv...) {
		if f.init == nil {
			continue
		}
		why, err := f.init(b, f == b.explicit)
		if err != nil {
			return err
		}
		if why != "" {
			b.unavail[f] = why
		}
	}
	b.chain = [3][]*family{fwd, bwd, kv}
	return nil
}

// Plan decides how the pass dir of p with storage dt runs on this
// Backend: the families of its chain are asked in order and the first
// that takes p wins (a family selected by name is asked alone, and its
// refusal is the error). It is the only place a kernel, tile or pipeline
// is chosen. It may run the cooperative-matrix layout probe (once per
// Backend and storage type) and waits for it under ctx.
func (b *Backend) Plan(ctx context.Context, p *spec.Problem, dt spec.DType, dir Dir) (*Plan, error) {
	if err := CheckProblem(p); err != nil {
		return nil, err
	}
	if err := b.supports(dt); err != nil {
		return nil, err
	}
	if int(dir) >= len(b.chain) {
		return nil, fmt.Errorf("%w: pass %v", ErrInvalid, dir)
	}
	if (dir == KV) != (p.KV != nil) {
		return nil, fmt.Errorf("%w: the %v pass runs KV-cache problems only, and they only it", ErrInvalid, dir)
	}
	var declined []string
	tooLarge := false // a family that runs dt found p too large
	for _, f := range b.chain[dir] {
		if why, no := b.unavail[f]; no {
			if f.whyFor != nil {
				why = f.whyFor(b, dt)
			}
			declined = append(declined, f.name+": "+why)
			continue
		}
		if p.Ext != nil && !f.ext {
			err := fmt.Errorf("%w: %s runs no window, softcap, ALiBi, dropout, bias, packed sequences or key counts", ErrUnsupported, f.name)
			if f == b.explicit {
				return nil, err
			}
			declined = append(declined, f.name+": "+err.Error())
			continue
		}
		pl, err := f.plan(ctx, b, p, dt)
		if err == nil {
			pl.Dir = dir
			err = b.planBias(ctx, p, dt, pl)
		}
		if err == nil {
			pl.bindExt(p)
			err = b.dropShared(p, pl)
		}
		if err == nil {
			err = b.address(p, dt, pl)
		}
		if err == nil {
			err = checkGrids(b.info, pl)
		}
		if err == nil {
			pl.Family, pl.Declined = f.name, declined
			for i := range pl.Launches {
				pl.Launches[i].Family = f.name
			}
			return pl, nil
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		if f == b.explicit {
			return nil, err
		}
		tooLarge = tooLarge || errors.Is(err, ErrTooLarge)
		declined = append(declined, f.name+": "+err.Error())
	}
	sentinel := ErrUnsupported // (the error wraps ErrTooLarge when size is why)
	if tooLarge {
		sentinel = ErrTooLarge
	}
	return nil, fmt.Errorf("%w: no kernel family runs %v %s on %s: %s", sentinel, dt, dir, b.info.Name, strings.Join(declined, "; "))
}

// checkGrids refuses a plan with a launch whose grid exceeds the device's
// workgroup counts (ErrTooLarge), so that Plan, not the call, reports it.
func checkGrids(info device.Info, pl *Plan) error {
	for _, l := range pl.Launches {
		end := l.Grid
		for i := range end {
			end[i] += l.Base[i]
		}
		if err := pipeline.CheckGroups(info, end); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrTooLarge, l.Kernel, err)
		}
	}
	return nil
}

// Launches lists the dispatches of the pass (backward or forward) of p
// with storage dt, in recording order: Plan's launches.
func (b *Backend) Launches(ctx context.Context, p *spec.Problem, dt spec.DType, backward bool) ([]Launch, error) {
	dir := Fwd
	if backward {
		dir = Bwd
	}
	pl, err := b.Plan(ctx, p, dt, dir)
	if err != nil {
		return nil, err
	}
	return pl.Launches, nil
}

// Statistics returns the driver compiler's statistics of the pipeline
// launch l runs (register count, spills, shared memory…, as the driver
// names them; see device.Statistic), building the pipeline if no call
// has yet. It needs a Backend on a device opened with
// device.Options.PipelineStatistics (Options.PipelineStatistics):
// otherwise the error wraps ErrUnsupported.
func (b *Backend) Statistics(l *Launch) ([]device.Statistic, error) {
	if err := b.enter(); err != nil {
		return nil, err
	}
	defer b.leave()
	if !b.info.PipelineStatistics {
		return nil, fmt.Errorf("vkattn: %s: %w: no compiler statistics: the device was opened without them (Options.PipelineStatistics) or does not report them (device.Info.PipelineStatistics)",
			l.key.Name, ErrUnsupported)
	}
	p, err := b.cache.Get(l.key)
	if err != nil {
		return nil, fmt.Errorf("vkattn: pipeline %s: %w", l.key.Name, err)
	}
	st, err := p.Statistics()
	if err != nil {
		return nil, fmt.Errorf("vkattn: %w", err)
	}
	return st, nil
}

// Kernel names the forward family the Backend prefers: the selected one,
// or the first auto family the device can run ("flash_cm" on devices with
// cooperative matrices, else "flash"). Which family runs a given problem
// is Plan's answer.
func (b *Backend) Kernel() string {
	for _, f := range b.chain[Fwd] {
		if _, no := b.unavail[f]; !no {
			return f.name
		}
	}
	return b.chain[Fwd][0].name
}

// operandBufs are the buffers of one recorded pass, by operand.
type operandBufs [numOperands]*device.Buffer

// readyLaunch is a launch ready to record: its pipeline, push-constant
// block and buffers.
type readyLaunch struct {
	l    *Launch
	pipe *device.Pipeline
	push []byte
	args []*device.Buffer
}

// dispatch records the workgroups base … base+groups−1 of the launch
// (counted from the launch's Base).
func (rl *readyLaunch) dispatch(r *device.Recorder, base, groups [3]uint32) error {
	for i := range base {
		base[i] += rl.l.Base[i]
	}
	if err := r.DispatchBase(rl.pipe, rl.push, base, groups, rl.args...); err != nil {
		return fmt.Errorf("vkattn: %w", err)
	}
	return nil
}

// prepare resolves what recording pl needs: its pipelines (every one
// before anything else), its scratch buffers from s, and each launch's
// bindings and push constants (push's block for the launch, given the
// buffers).
func (b *Backend) prepare(s *scratch, pl *Plan, push func(l *Launch, bufs operandBufs) ([]byte, error), bufs operandBufs) ([]readyLaunch, error) {
	rls := make([]readyLaunch, len(pl.Launches))
	for i := range pl.Launches {
		l := &pl.Launches[i]
		p, err := b.cache.Get(l.key)
		if err != nil {
			return nil, fmt.Errorf("vkattn: pipeline %s: %w", l.key.Name, err)
		}
		rls[i] = readyLaunch{l: l, pipe: p}
	}
	for op, n := range pl.Scratch {
		buf, err := s.get(n)
		if err != nil {
			return nil, err
		}
		bufs[op] = buf
	}
	for i := range rls {
		l := rls[i].l
		args := make([]*device.Buffer, len(l.Bindings))
		for j, op := range l.Bindings {
			if args[j] = bufs[op]; args[j] == nil {
				return nil, fmt.Errorf("vkattn: %s: operand %v not bound", l.key.Name, op)
			}
		}
		block, err := push(l, bufs) // (Plan checked the grid against the device's counts)
		if err != nil {
			return nil, err
		}
		rls[i].push, rls[i].args = block, args
	}
	return rls, nil
}

// attentionPush is the push-constant block of the attention passes'
// launches: pc, followed by the device addresses of an addressed launch.
func attentionPush(pc shaders.Params) func(l *Launch, bufs operandBufs) ([]byte, error) {
	plain := pc.Bytes()
	return func(l *Launch, bufs operandBufs) ([]byte, error) {
		if len(l.Addresses) > 0 {
			return addressedPush(l, pc, bufs)
		}
		return plain, nil
	}
}

// addressedPush is addressed launch l's push-constant block: pc followed
// by the device address of each of l.Addresses.
func addressedPush(l *Launch, pc shaders.Params, bufs operandBufs) ([]byte, error) {
	if len(l.Addresses) > shaders.MaxAddressSlots {
		return nil, fmt.Errorf("vkattn: %s: %d address slots, the push block holds %d", l.key.Name, len(l.Addresses), shaders.MaxAddressSlots)
	}
	ap := shaders.AddressedParams{Params: pc}
	for i, op := range l.Addresses {
		if ap.Addr[i] = bufs[op].Address(); ap.Addr[i] == 0 {
			return nil, fmt.Errorf("vkattn: %s: operand %v has no device address", l.key.Name, op)
		}
	}
	return ap.Bytes(), nil
}

// dropShared adds the keep bits of a dropout problem's tiles to its
// launches' shared memory (shaders.DropSharedBytes, beyond the one word
// the kernels' formulas count; the tile checks counted them too: limFor,
// dropExtra), and refuses a tile that then no longer fits or whose key
// tile ext.glsl's drop_word cannot fill (shaders.DropKeyTile).
func (b *Backend) dropShared(p *spec.Problem, pl *Plan) error {
	if !dropout(p) {
		return nil
	}
	for i := range pl.Launches {
		l := &pl.Launches[i]
		if !slices.Contains(l.Bindings, OpExt) || l.BC == 0 {
			continue
		}
		if err := shaders.CheckDropKeys(l.BC); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrUnsupported, l.key.Name, err)
		}
		l.SharedBytes += dropExtra(true, l.BR, l.BC)
		if l.SharedBytes > b.lim.SharedBytes {
			return fmt.Errorf("%w: %s: %d bytes of shared memory with dropout's keep bits, the device has %d",
				ErrUnsupported, l.key.Name, l.SharedBytes, b.lim.SharedBytes)
		}
	}
	return nil
}

// dropExtra is the shared memory dropout's keep bits add to a tile of br
// query rows and bc keys (0 without dropout): DropSharedBytes less the
// one word every *SharedBytes formula counts.
func dropExtra(drop bool, br, bc int) int {
	if !drop {
		return 0
	}
	return shaders.DropSharedBytes(br, bc) - shaders.DropPlaceholder
}

// dropout reports whether p drops probabilities.
func dropout(p *spec.Problem) bool { return extDrops(p.Ext) }

// extDrops reports whether options ext drop (nil drops nothing).
func extDrops(ext *spec.Ext) bool { return ext != nil && ext.Dropout != nil }

// extPlan is what pl adds to its Ext buffer (shaders.ExtPlan): the dS
// scratch's use and its launches' head groups (bwd_cm_dkdv's KV heads',
// the others' query heads'; a pass has one kernel of each at most).
func (pl *Plan) extPlan() shaders.ExtPlan {
	ep := shaders.ExtPlan{DS: pl.ds}
	for _, l := range pl.Launches {
		if shaders.BaseKernel(l.Kernel) == shaders.KernelBwdCMDKDV {
			ep.KVHeadGroup = max(ep.KVHeadGroup, l.HeadGroup)
		} else {
			ep.HeadGroup = max(ep.HeadGroup, l.HeadGroup)
		}
	}
	return ep
}

// limFor is the device's limits for p's scalar tiles (Limits.Dropout set
// for a dropout call).
func (b *Backend) limFor(p *spec.Problem) shaders.Limits {
	l := b.lim
	l.Dropout = dropout(p)
	return l
}

// bindExt gives the plan's Ext scratch its size (shaders.ExtWords of p)
// when a launch binds it.
func (pl *Plan) bindExt(p *spec.Problem) {
	for _, l := range pl.Launches {
		if slices.Contains(l.Bindings, OpExt) {
			if pl.Scratch == nil {
				pl.Scratch = map[Operand]int64{}
			}
			pl.Scratch[OpExt] = int64(len(shaders.ExtBytes(p, shaders.ExtPlan{})))
			return
		}
	}
}

// newLaunch fills the pipeline key of a launch of kernel with storage dt,
// its specialization constants and subgroup settings; the name carries
// the configuration and head dims. A kernel of shaders.ExtKernels also
// binds the Ext buffer and the bias's buffers (biasBinds) and is
// specialized to the extended variant p needs (shaders.ExtSpecFor).
func (b *Backend) newLaunch(kernel string, dt spec.DType, p *spec.Problem, config string, sp []device.Spec, reqSG uint32, full bool, binds ...Operand) (Launch, error) {
	spv, err := b.module(kernel, dt)
	if err != nil {
		return Launch{}, err
	}
	if slices.Contains(shaders.ExtKernels, kernel) {
		binds = append(append(slices.Clip(binds), OpExt), biasBinds(kernel, p)...)
		ext := shaders.ExtSpecFor(kernel, p)
		sp = setSpec(sp, shaders.SpecExt, ext)
		if ext != 0 {
			config += fmt.Sprintf(" ext%d", ext)
		}
	}
	return Launch{
		Kernel: kernel, DType: dt, Config: config, Bindings: binds,
		key: pipeline.Key{
			Name:          fmt.Sprintf("%s.%s(%s D=%d DV=%d)", kernel, dt.Short(), config, p.D, p.Dv),
			SPIRV:         spv,
			Spec:          sp,
			PushSize:      shaders.ParamsSize,
			Bindings:      len(binds),
			SubgroupSize:  reqSG,
			FullSubgroups: full,
		},
	}, nil
}

// setSpec returns sp with constant id set to v (replaced, or appended
// to a copy).
func setSpec(sp []device.Spec, id, v uint32) []device.Spec {
	if i := slices.IndexFunc(sp, func(e device.Spec) bool { return e.ID == id }); i >= 0 {
		sp[i].Value = v
		return sp
	}
	return append(slices.Clip(sp), device.Spec{ID: id, Value: v})
}

// module returns the SPIR-V of kernel for storage dt, loaded once per
// Backend (the pipeline cache hashes a module's bytes once per slice).
func (b *Backend) module(kernel string, dt spec.DType) ([]byte, error) {
	k := kernel + "." + dt.Short()
	b.modMu.Lock()
	defer b.modMu.Unlock()
	if spv, ok := b.modules[k]; ok {
		return spv, nil
	}
	spv, err := shaders.SPIRV(kernel, dt.Short())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	b.modules[k] = spv
	return spv, nil
}

// errNotForDType is a family's refusal of a storage type it has no build
// (or no device support) for.
func errNotForDType(name string, dt spec.DType) error {
	return fmt.Errorf("%w: %s cannot run %v storage here", ErrUnsupported, name, dt)
}

// isCtxErr reports whether err is a context's cancellation or deadline.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
