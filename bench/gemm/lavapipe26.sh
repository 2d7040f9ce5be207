#!/usr/bin/env bash
# bench/gemm/lavapipe26.sh PROGRAM [ARGS...]
# Runs PROGRAM on a CPU Vulkan driver that has cooperative matrices: Mesa 26
# lavapipe from Debian sid (VK_KHR_cooperative_matrix 8×8×8 at subgroup 8,
# VK_NV_cooperative_matrix2 subgroup-scope reductions/conversions/per-element
# ops; no workgroup scope, no tensor addressing). Bookworm's Mesa 22 and
# trixie's Mesa 25.0 lavapipe have none. Lets the KHR coopmat kernels
# (flash_cm MODE 0 and 1, gemm_khr) be checked without a GPU:
#   go build -o /tmp/gemm ./bench/gemm
#   bench/gemm/lavapipe26.sh /tmp/gemm -mode check -quick -only nsg4-bc32
# The cooperative-matrix tests of internal/vkattn (skipped on Mesa 22) run
# there too:
#   go test -c -o /tmp/vkattn.test ./internal/vkattn
#   FLASHVK_VALIDATION=0 bench/gemm/lavapipe26.sh /tmp/vkattn.test -test.run TestBwdCM
# (FLASHVK_VALIDATION=0 where bookworm's validation layer is installed: it
# predates these extensions and reports their use as errors, which fail
# the tests.)
# The packages are fetched once with apt-get download under a private apt
# state (the system's apt state is untouched) into $FLASHVK_CACHE/lavapipe26
# and run through sid's own dynamic loader. Not pinned: sid moves; the
# versions used are printed.
set -euo pipefail
cache=${FLASHVK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flashvk}/lavapipe26
root=$cache/root
lib=$root/usr/lib/x86_64-linux-gnu
if [ ! -f "$root/.complete" ]; then
	mkdir -p "$cache/apt/lists/partial" "$cache/apt/cache/archives/partial" "$cache/debs"
	echo "deb ${FLASHVK_DEBIAN_MIRROR:-http://deb.debian.org/debian} sid main" >"$cache/apt/sources.list"
	o=(-o "Dir::Etc::SourceList=$cache/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
		-o "Dir::State::Lists=$cache/apt/lists" -o "Dir::Cache=$cache/apt/cache" -o Dir::State::status=/dev/null
		-o APT::Architecture=amd64 -o APT::Architectures=amd64 -o APT::Sandbox::User=root -o Acquire::Languages=none)
	apt-get -qq "${o[@]}" update
	(cd "$cache/debs" && apt-get -qq "${o[@]}" download mesa-vulkan-drivers libvulkan1 libc6 libgcc-s1 libstdc++6 \
		libdisplay-info3 libpng16-16t64 libdrm-amdgpu1 libdrm2 libelf1t64 libexpat1 libllvm22 libwayland-client0 \
		libx11-xcb1 libx11-6 libxcb-dri3-0 libxcb-present0 libxcb-randr0 libxcb-shm0 libxcb-sync1 libxcb-xfixes0 \
		libxcb1 libxshmfence1 libzstd1 zlib1g libedit2 libffi8 libxml2-16 libz3-4 liblzma5 libxau6 libxdmcp6 \
		libbsd0 libmd0 libtinfo6 libncursesw6)
	for f in "$cache"/debs/*.deb; do dpkg -x "$f" "$root"; done
	ls "$cache/debs" >"$root/.versions"
	touch "$root/.complete"
fi
export VK_DRIVER_FILES=$root/usr/share/vulkan/icd.d/lvp_icd.json
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$@"
