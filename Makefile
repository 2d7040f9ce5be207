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
