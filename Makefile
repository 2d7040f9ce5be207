# flashvk Makefile.
#
#   make shaders        rebuild internal/shaders/*.spv (NAME.f32.spv, NAME.f16.spv and
#                       NAME.bf16.spv for every kernel) with the pinned glslang
#                       and validate each
#                       with spirv-val (toolchain: scripts/toolchain.sh,
#                       pinned in scripts/glslang.lock; GLSLANG and
#                       SPIRV_TOOLS_DIR override it)
#                       plus the cooperative-matrix kernels (CM_KERNELS:
#                       NAME.f16.spv and NAME.bf16.spv, and NAME.f32.spv for
#                       flash_cm, bwd_cm_dkdv and bwd_cm_dq,
#                       --target-env vulkan1.3; the bf16 and f32 ones with
#                       the pinned glslang 16,
#                       FLASHVK_TOOLCHAIN=16, GLSLANG16 / SPIRV_TOOLS16_DIR
#                       override it)
#                       plus the addressed variants (-DADDRESSED=1,
#                       operands through buffer device addresses):
#                       NAME.addr.DTYPE.spv for ADDR_KERNELS (f32, f16,
#                       bf16, vulkan1.1) and ADDR_CM_KERNELS (f16, bf16,
#                       vulkan1.3, bf16 with glslang 16; and f32 for
#                       CM_F32_KERNELS, glslang 16), same toolchain
#                       and spirv-val
#   make shaders-check  rebuild into a temporary folder and fail if any
#                       committed .spv differs (CI); bench/gemm's too
#   make bench-shaders  rebuild bench/gemm's own kernels (gemm_khr, gemm_cm2,
#                       flash_cm2: bench/gemm/build.sh, same toolchain)

SHADER_KERNELS := naive minimal flash bwd_pre bwd_dkdv bwd_dq decode decode_combine kv_append bias_summary bias_reduce
SHADER_DTYPES := f32 f16 bf16
SPVDIR ?= internal/shaders
SHADER_SPV := $(foreach k,$(SHADER_KERNELS),$(foreach t,$(SHADER_DTYPES),$(SPVDIR)/$(k).$(t).spv))
# Cooperative-matrix kernels: f16 and bf16 storage, Vulkan 1.3 (SPIR-V 1.6);
# bf16 (GL_EXT_bfloat16) needs glslang 16.
CM_KERNELS := flash_cm flash_cm_probe bwd_cm_dkdv bwd_cm_dq
CM_TARGET_ENV := vulkan1.3
CM_SPV := $(foreach k,$(CM_KERNELS),$(SPVDIR)/$(k).f16.spv)
CM_BF16_SPV := $(foreach k,$(CM_KERNELS),$(SPVDIR)/$(k).bf16.spv)
# fp32 storage (operands split into bf16 planes; glslang 16, like bf16):
# all but the probe.
CM_F32_KERNELS := flash_cm bwd_cm_dkdv bwd_cm_dq
CM_F32_SPV := $(foreach k,$(CM_F32_KERNELS),$(SPVDIR)/$(k).f32.spv)
# Addressed variants (compile-shader.sh VARIANT addr), built like their
# base kernels.
ADDR_KERNELS := flash bwd_pre bwd_dkdv bwd_dq
ADDR_CM_KERNELS := flash_cm bwd_cm_dkdv bwd_cm_dq
ADDR_F32_SPV := $(foreach k,$(ADDR_KERNELS),$(SPVDIR)/$(k).addr.f32.spv)
ADDR_F16_SPV := $(foreach k,$(ADDR_KERNELS),$(SPVDIR)/$(k).addr.f16.spv)
ADDR_BF16_SPV := $(foreach k,$(ADDR_KERNELS),$(SPVDIR)/$(k).addr.bf16.spv)
ADDR_CM_SPV := $(foreach k,$(ADDR_CM_KERNELS),$(SPVDIR)/$(k).addr.f16.spv)
ADDR_CM_BF16_SPV := $(foreach k,$(ADDR_CM_KERNELS),$(SPVDIR)/$(k).addr.bf16.spv)
ADDR_CM_F32_SPV := $(foreach k,$(CM_F32_KERNELS),$(SPVDIR)/$(k).addr.f32.spv)
ADDR_SPV := $(ADDR_F32_SPV) $(ADDR_F16_SPV) $(ADDR_BF16_SPV) $(ADDR_CM_SPV) $(ADDR_CM_BF16_SPV) $(ADDR_CM_F32_SPV)
SHADER_DEPS := internal/shaders/params.glsl internal/shaders/bf16.glsl internal/shaders/attn_params.glsl internal/shaders/kv_params.glsl internal/shaders/ext.glsl internal/shaders/bwd_common.glsl internal/shaders/cm_common.glsl internal/shaders/cm_types.glsl internal/shaders/bias_stage.glsl scripts/glslang.lock scripts/compile-shader.sh

.PHONY: shaders shaders-check bench-shaders bench-shaders-check

shaders: $(SHADER_SPV) $(CM_SPV) $(CM_BF16_SPV) $(CM_F32_SPV) $(ADDR_SPV)

# Explicit rules (they win over the patterns below for these targets).
$(CM_SPV): $(SPVDIR)/%.f16.spv: internal/shaders/%.comp $(SHADER_DEPS)
	@scripts/compile-shader.sh $< f16 $@ $(CM_TARGET_ENV)
	@echo "  SPV  $@"

$(CM_BF16_SPV): $(SPVDIR)/%.bf16.spv: internal/shaders/%.comp $(SHADER_DEPS)
	@FLASHVK_TOOLCHAIN=16 scripts/compile-shader.sh $< bf16 $@ $(CM_TARGET_ENV)
	@echo "  SPV  $@ (glslang 16)"

$(CM_F32_SPV): $(SPVDIR)/%.f32.spv: internal/shaders/%.comp $(SHADER_DEPS)
	@FLASHVK_TOOLCHAIN=16 scripts/compile-shader.sh $< f32 $@ $(CM_TARGET_ENV)
	@echo "  SPV  $@ (glslang 16)"

$(ADDR_CM_F32_SPV): $(SPVDIR)/%.addr.f32.spv: internal/shaders/%.comp $(SHADER_DEPS)
	@FLASHVK_TOOLCHAIN=16 scripts/compile-shader.sh $< f32 $@ $(CM_TARGET_ENV) addr
	@echo "  SPV  $@ (glslang 16)"

$(ADDR_F32_SPV): $(SPVDIR)/%.addr.f32.spv: internal/shaders/%.comp $(SHADER_DEPS)
	@scripts/compile-shader.sh $< f32 $@ vulkan1.1 addr
	@echo "  SPV  $@"

$(ADDR_F16_SPV): $(SPVDIR)/%.addr.f16.spv: internal/shaders/%.comp $(SHADER_DEPS)
	@scripts/compile-shader.sh $< f16 $@ vulkan1.1 addr
	@echo "  SPV  $@"

$(ADDR_BF16_SPV): $(SPVDIR)/%.addr.bf16.spv: internal/shaders/%.comp $(SHADER_DEPS)
	@scripts/compile-shader.sh $< bf16 $@ vulkan1.1 addr
	@echo "  SPV  $@"

$(ADDR_CM_SPV): $(SPVDIR)/%.addr.f16.spv: internal/shaders/%.comp $(SHADER_DEPS)
	@scripts/compile-shader.sh $< f16 $@ $(CM_TARGET_ENV) addr
	@echo "  SPV  $@"

$(ADDR_CM_BF16_SPV): $(SPVDIR)/%.addr.bf16.spv: internal/shaders/%.comp $(SHADER_DEPS)
	@FLASHVK_TOOLCHAIN=16 scripts/compile-shader.sh $< bf16 $@ $(CM_TARGET_ENV) addr
	@echo "  SPV  $@ (glslang 16)"

$(SPVDIR)/%.f32.spv: internal/shaders/%.comp $(SHADER_DEPS)
	@scripts/compile-shader.sh $< f32 $@
	@echo "  SPV  $@"

$(SPVDIR)/%.f16.spv: internal/shaders/%.comp $(SHADER_DEPS)
	@scripts/compile-shader.sh $< f16 $@
	@echo "  SPV  $@"

$(SPVDIR)/%.bf16.spv: internal/shaders/%.comp $(SHADER_DEPS)
	@scripts/compile-shader.sh $< bf16 $@
	@echo "  SPV  $@"

shaders-check: bench-shaders-check
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(MAKE) --no-print-directory shaders SPVDIR="$$tmp" && \
	scripts/shaders-check.sh internal/shaders "$$tmp"

bench-shaders:
	@bench/gemm/build.sh

bench-shaders-check:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	bench/gemm/build.sh "$$tmp" && \
	scripts/shaders-check.sh bench/gemm/shaders "$$tmp" "make bench-shaders"

# ---- build and test -------------------------------------------------------
#   make build        the flashvk CLI into ./flashvk
#   make test         every test (the README's test command; CI runs it with
#                     FLASHVK_REQUIRE_VULKAN=1 FLASHVK_VALIDATION=1)
#   make test-race    the concurrency tests under the race detector
#   make test-vulkan  the Vulkan suites only, validation layer on
#   make bench-cpu    the CPU backend's go benchmarks (benchstat format)

GO ?= go
GOTEST_TIMEOUT ?= 60m

.PHONY: build test test-race test-vulkan bench-cpu

build:
	$(GO) build -o flashvk ./cmd/flashvk

test:
	$(GO) test -timeout $(GOTEST_TIMEOUT) ./...

test-race:
	$(GO) test -race -timeout $(GOTEST_TIMEOUT) -run 'Concurrent|Singleflight' ./internal/device/ ./internal/pipeline/
	$(GO) test -race -timeout $(GOTEST_TIMEOUT) -run 'TestConformance(CPU|Vulkan)$$/concurrent' ./attention/

test-vulkan:
	FLASHVK_VALIDATION=1 $(GO) test -timeout $(GOTEST_TIMEOUT) ./internal/device/... ./internal/pipeline/ ./internal/vkattn/ ./attention/ -run 'Vulkan|Device|Pipeline|Host|Step|Limits|Batch'

bench-cpu:
	$(GO) test -run XXX -bench . -benchtime 3x ./internal/cpu/
