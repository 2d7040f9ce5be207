#!/usr/bin/env bash
# Pinned SPIR-V toolchain for flashvk's shaders.
#
# Debian bookworm's glslang (12) lacks GL_KHR_cooperative_matrix, so we use
# Debian trixie's glslang-tools / spirv-tools, fetched with `apt-get download`
# under a PRIVATE sources list, lists and cache (the system's apt state is
# never touched), unpacked with `dpkg -x` into a cache folder and run through
# the unpacked trixie dynamic loader with its own library path.
#
# Versions and .deb hashes are pinned in scripts/glslang.lock (see its
# header for the rules).
#
# Usage:
#   scripts/toolchain.sh root               ensure the toolchain, print its root
#   scripts/toolchain.sh run TOOL [ARGS]    run TOOL (glslangValidator,
#                                           spirv-val, spirv-dis, ...)
#   scripts/toolchain.sh versions           print the pinned and used versions
#   scripts/toolchain.sh update-lock        re-pin to the archive's current
#                                           trixie versions (then `make shaders`)
#
# Environment:
#   FLASHVK_CACHE            cache folder (default ${XDG_CACHE_HOME:-~/.cache}/flashvk)
#   FLASHVK_DEBIAN_MIRROR    Debian mirror (default: the host of this machine's
#                            bookworm entry in /etc/apt/sources.list*, else
#                            http://deb.debian.org/debian)
#   FLASHVK_DEBIAN_SUITE     suite to fetch from (default trixie)
#   FLASHVK_TOOLCHAIN_STRICT 1: runtime libraries must match the lock too
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lock="$here/glslang.lock"
suite=${FLASHVK_DEBIAN_SUITE:-trixie}
cache_base=${FLASHVK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flashvk}
triplet=x86_64-linux-gnu

die() { echo "toolchain.sh: error: $*" >&2; exit 1; }
warn() { echo "toolchain.sh: warning: $*" >&2; }

[ "$(uname -m)" = x86_64 ] || die "only x86_64 hosts are supported (set GLSLANG and SPIRV_TOOLS_DIR to your own glslang >= 15 / spirv-tools instead)"

# lock_entries prints "package version sha256 role" lines of the lock.
lock_entries() { grep -vE '^[[:space:]]*(#|$|glslang-version)' "$lock"; }
lock_glslang_version() { awk '$1=="glslang-version"{print $2}' "$lock"; }

# The cache folder is keyed by the lock's content, so re-pinning never reuses
# an old unpack.
lock_key=$( (lock_entries; lock_glslang_version) | sha256sum | cut -c1-16)
cache="$cache_base/glslang-$suite-$lock_key"
root="$cache/root"

detect_mirror() {
	if [ -n "${FLASHVK_DEBIAN_MIRROR:-}" ]; then
		echo "${FLASHVK_DEBIAN_MIRROR%/}"
		return
	fi
	local uri
	# one-line format: deb [opts] URI SUITE COMPONENTS...
	uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
		sed -nE 's/^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+)[[:space:]]+bookworm([[:space:]].*)?$/\2/p' | head -n1 || true)
	if [ -z "$uri" ]; then
		# deb822 format: a stanza whose Suites include plain "bookworm"
		uri=$(awk '
			BEGIN { RS=""; FS="\n" }
			{
				u=""; s=0
				for (i = 1; i <= NF; i++) {
					if ($i ~ /^URIs:/) { u=$i; sub(/^URIs:[[:space:]]*/, "", u); split(u, a, /[[:space:]]+/); u=a[1] }
					if ($i ~ /^Suites:/ && $i ~ /[[:space:]]bookworm([[:space:]]|$)/) s=1
				}
				if (s && u != "") { print u; exit }
			}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	fi
	echo "${uri:-http://deb.debian.org/debian}" | sed 's:/*$::'
}

# apt_setup prepares a private apt state in $1 and sets the array APT_OPTS.
apt_setup() {
	local dir=$1 mirror
	mirror=$(detect_mirror)
	mkdir -p "$dir/lists/partial" "$dir/apt/archives/partial"
	echo "deb $mirror $suite main" >"$dir/sources.list"
	APT_OPTS=(
		-o "Dir::Etc::SourceList=$dir/sources.list"
		-o Dir::Etc::SourceParts=/dev/null
		-o "Dir::State::Lists=$dir/lists"
		-o "Dir::Cache=$dir/apt"
		-o Dir::State::status=/dev/null
		-o APT::Architecture=amd64
		-o APT::Architectures=amd64
		-o APT::Sandbox::User=root
		-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
		-o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
		-o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
		-o Acquire::Languages=none
	)
	echo "toolchain.sh: apt-get update ($mirror $suite main, private lists)" >&2
	apt-get -qq "${APT_OPTS[@]}" update >&2 || die "apt-get update of $mirror $suite failed"
}

candidate_version() { apt-cache "${APT_OPTS[@]}" policy "$1" | awk '$1=="Candidate:"{print $2}'; }

# run_tool TOOL ARGS... runs a tool of the unpacked root.
run_tool() {
	local tool=$1
	shift
	exec "$root/usr/lib/$triplet/ld-linux-x86-64.so.2" --library-path "$root/usr/lib/$triplet" "$root/usr/bin/$tool" "$@"
}

ensure() {
	[ -f "$root/.complete" ] && return 0
	command -v apt-get >/dev/null || die "apt-get not found: set GLSLANG and SPIRV_TOOLS_DIR to glslang >= $(lock_glslang_version) / spirv-tools"
	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock 9
	[ -f "$root/.complete" ] && return 0
	local work
	work=$(mktemp -d "$cache/.work.XXXXXX")
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" EXIT
	apt_setup "$work/apt-state"
	mkdir -p "$work/debs" "$work/root"
	local pkg ver sha role deb got used=()
	while read -r pkg ver sha role; do
		if ! (cd "$work/debs" && apt-get -qq "${APT_OPTS[@]}" download "$pkg=$ver" >&2 2>/dev/null); then
			if [ "$role" = tool ] || [ "${FLASHVK_TOOLCHAIN_STRICT:-0}" = 1 ]; then
				die "pinned $pkg=$ver ($role) is not available from the $suite archive (now: $(candidate_version "$pkg")). Re-pin with 'scripts/toolchain.sh update-lock' and regenerate the SPIR-V with 'make shaders'."
			fi
			local cand
			cand=$(candidate_version "$pkg")
			[ -n "$cand" ] || die "$pkg is not in the $suite archive"
			warn "runtime library $pkg=$ver is gone from the archive; using $cand (does not change the SPIR-V; set FLASHVK_TOOLCHAIN_STRICT=1 to refuse)"
			(cd "$work/debs" && apt-get -qq "${APT_OPTS[@]}" download "$pkg=$cand" >&2) || die "download of $pkg=$cand failed"
			used+=("$pkg $cand (lock: $ver)")
			continue
		fi
		deb=$(ls "$work/debs/${pkg}_"*.deb 2>/dev/null | head -n1)
		[ -n "$deb" ] || die "apt-get download $pkg=$ver produced no file"
		got=$(sha256sum "$deb" | cut -d' ' -f1)
		[ "$got" = "$sha" ] || die "$pkg=$ver: sha256 $got differs from the lock's $sha"
		used+=("$pkg $ver")
	done < <(lock_entries)
	for deb in "$work/debs"/*.deb; do
		dpkg -x "$deb" "$work/root"
	done
	local want have
	want=$(lock_glslang_version)
	have=$("$work/root/usr/lib/$triplet/ld-linux-x86-64.so.2" --library-path "$work/root/usr/lib/$triplet" \
		"$work/root/usr/bin/glslangValidator" --version | sed -nE 's/^Glslang Version: [0-9]+:([0-9.]+).*/\1/p')
	[ "$have" = "$want" ] || die "unpacked glslangValidator reports version '$have', the lock wants '$want'"
	printf '%s\n' "${used[@]}" >"$work/root/.versions"
	touch "$work/root/.complete"
	rm -rf "$root"
	mv "$work/root" "$root"
	rm -rf "$work"
	trap - EXIT
	exec 9>&-
	echo "toolchain.sh: installed glslang $have into $root" >&2
}

update_lock() {
	local work
	work=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" EXIT
	apt_setup "$work/apt-state"
	mkdir -p "$work/debs" "$work/root"
	local out="$work/lock" pkg ver sha role cand deb
	sed -n '/^#/p' "$lock" >"$out"
	while read -r pkg ver sha role; do
		cand=$(candidate_version "$pkg")
		[ -n "$cand" ] || die "$pkg is not in the $suite archive"
		(cd "$work/debs" && apt-get -qq "${APT_OPTS[@]}" download "$pkg=$cand" >&2) || die "download of $pkg=$cand failed"
		deb=$(ls "$work/debs/${pkg}_"*.deb | head -n1)
		dpkg -x "$deb" "$work/root"
		echo "$pkg $cand $(sha256sum "$deb" | cut -d' ' -f1) $role" >>"$out"
	done < <(lock_entries)
	local have
	have=$("$work/root/usr/lib/$triplet/ld-linux-x86-64.so.2" --library-path "$work/root/usr/lib/$triplet" \
		"$work/root/usr/bin/glslangValidator" --version | sed -nE 's/^Glslang Version: [0-9]+:([0-9.]+).*/\1/p')
	echo "glslang-version $have" >>"$out"
	cp "$out" "$lock"
	echo "toolchain.sh: wrote $lock (glslang $have); now run 'make shaders' and review the SPIR-V diff" >&2
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
root)
	ensure
	echo "$root"
	;;
run)
	[ $# -ge 1 ] || die "usage: toolchain.sh run TOOL [ARGS...]"
	ensure
	run_tool "$@"
	;;
versions)
	echo "lock ($lock):"
	lock_entries | awk '{printf "  %s %s (%s)\n", $1, $2, $4}'
	echo "  glslang-version $(lock_glslang_version)"
	ensure
	echo "unpacked ($root):"
	sed 's/^/  /' "$root/.versions"
	;;
update-lock)
	update_lock
	;;
*)
	die "usage: toolchain.sh {root|run TOOL [ARGS]|versions|update-lock}"
	;;
esac
