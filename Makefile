# flashvk Makefile.
#
#   make shaders        rebuild shaders/*.spv (NAME.f32.spv and NAME.f16.spv for
#                       every kernel) with the pinned glslang and validate each
#                       with spirv-val (toolchain: scripts/toolchain.sh,
#                       pinned in scripts/glslang.lock; GLSLANG and
#                       SPIRV_TOOLS_DIR override it)
#   make shaders-check  rebuild into a temporary folder and fail if any
#                       committed .spv differs (CI)

SHADER_KERNELS := naive minimal flash bwd_pre bwd_dkdv bwd_dq
SHADER_DTYPES := f32 f16
SPVDIR ?= shaders
SHADER_SPV := $(foreach k,$(SHADER_KERNELS),$(foreach t,$(SHADER_DTYPES),$(SPVDIR)/$(k).$(t).spv))
SHADER_DEPS := shaders/params.glsl scripts/glslang.lock scripts/compile-shader.sh

.PHONY: shaders shaders-check

shaders: $(SHADER_SPV)

$(SPVDIR)/%.f32.spv: shaders/%.comp $(SHADER_DEPS)
	@scripts/compile-shader.sh $< f32 $@
	@echo "  SPV  $@"

$(SPVDIR)/%.f16.spv: shaders/%.comp $(SHADER_DEPS)
	@scripts/compile-shader.sh $< f16 $@
	@echo "  SPV  $@"

shaders-check:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(MAKE) --no-print-directory shaders SPVDIR="$$tmp" && \
	scripts/shaders-check.sh shaders "$$tmp"

# ---- build and test -------------------------------------------------------
#   make build        the flashvk CLI into ./flashvk
#   make test         every test (the README's test command; CI runs it with
#                     FLASHVK_REQUIRE_VULKAN=1 FLASHVK_VALIDATION=1)
#   make test-vulkan  the Vulkan suites only, validation layer on
#   make bench-cpu    the CPU backend's go benchmarks (benchstat format)

GO ?= go
GOTEST_TIMEOUT ?= 60m

.PHONY: build test test-vulkan bench-cpu

build:
	$(GO) build -o flashvk ./cmd/flashvk

test:
	$(GO) test -timeout $(GOTEST_TIMEOUT) ./...

test-vulkan:
	FLASHVK_VALIDATION=1 $(GO) test -timeout $(GOTEST_TIMEOUT) ./device/... ./pipeline/ ./vkattn/ ./attention/ -run 'Vulkan|Device|Pipeline|Host|Step|Limits|Batch'

bench-cpu:
	$(GO) test -run XXX -bench . -benchtime 3x ./cpu/
