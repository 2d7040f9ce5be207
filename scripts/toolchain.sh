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
# A second toolchain, glslang 16 (GL_EXT_bfloat16, which glslang 15 lacks)
# with the spirv-tools it was built against (SPV_KHR_bfloat16 validation),
# builds only the bf16 cooperative-matrix modules (Makefile CM_BF16_SPV).
# Its two .debs come from Debian unstable, whose packages vanish when it
# moves on, so the lock pins each by pool path, sha256 and sha1 ("glslang16"
# lines) and they are fetched with curl/wget from the first source that
# has them: the Debian mirror's pool (while the version is in sid/testing),
# then snapshot.debian.org by sha1 (/file/SHA1, permanent) and by archive
# timestamp. The sha256 is always checked. Both tools are self-contained
# (libc6 >= 2.38, libstdc++6 >= 13.1) and run through the glslang 15
# toolchain's trixie loader and runtime libraries.
#
# Usage:
#   scripts/toolchain.sh root               ensure the toolchain, print its root
#   scripts/toolchain.sh run TOOL [ARGS]    run TOOL (glslangValidator,
#                                           spirv-val, spirv-dis, ...)
#   scripts/toolchain.sh root16             ensure the glslang 16 toolchain, print its root
#   scripts/toolchain.sh run16 TOOL [ARGS]  run TOOL of the glslang 16 toolchain
#   scripts/toolchain.sh versions           print the pinned and used versions
#   scripts/toolchain.sh update-lock        re-pin to the archive's current
#                                           trixie versions (then `make shaders`;
#                                           the glslang16 lines are edited by hand)
#
# Environment:
#   FLASHVK_CACHE            cache folder (default ${XDG_CACHE_HOME:-~/.cache}/flashvk)
#   FLASHVK_DEBIAN_MIRROR    Debian mirror (default: the host of this machine's
#                            bookworm entry in /etc/apt/sources.list*, else
#                            http://deb.debian.org/debian)
#   FLASHVK_DEBIAN_SUITE     suite to fetch from (default trixie)
#   FLASHVK_TOOLCHAIN_STRICT 1: runtime libraries must match the lock too
#   FLASHVK_SNAPSHOT         snapshot.debian.org base (default
#                            https://snapshot.debian.org)
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
lock_entries() { grep -vE '^[[:space:]]*(#|$|glslang-version|glslang16)' "$lock"; }
lock_glslang_version() { awk '$1=="glslang-version"{print $2}' "$lock"; }
# lock16_entries prints "package version pool-path sha256 sha1" lines of the
# glslang 16 toolchain; lock16 KEY prints the value of line "glslang16-KEY".
lock16_entries() { awk '$1=="glslang16"{print $2, $3, $4, $5, $6}' "$lock"; }
lock16() { awk -v k="glslang16-$1" '$1==k{print $2}' "$lock"; }

# The cache folder is keyed by the lock's content, so re-pinning never reuses
# an old unpack.
lock_key=$( (lock_entries; lock_glslang_version) | sha256sum | cut -c1-16)
cache="$cache_base/glslang-$suite-$lock_key"
root="$cache/root"
lock16_key=$( (echo "$lock_key"; lock16_entries; lock16 version) | sha256sum | cut -c1-16)
cache16="$cache_base/glslang16-$lock16_key"
root16="$cache16/root"

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

# loader ROOT sets the array LOADER to the command that runs a binary
# through the trixie dynamic loader and runtime libraries unpacked in ROOT.
loader() {
	local lib="$1/usr/lib/$triplet"
	LOADER=("$lib/ld-linux-x86-64.so.2" --library-path "$lib")
}

# glslang_version ROOT GLSLANG prints the version that GLSLANG (a
# glslangValidator) reports when run through ROOT's loader.
glslang_version() {
	loader "$1"
	"${LOADER[@]}" "$2" --version | sed -nE 's/^Glslang Version: [0-9]+:([0-9.]+).*/\1/p'
}

# run_tool DIR TOOL ARGS... runs TOOL of the unpacked root DIR ($root or
# $root16) with the glslang 15 root's loader and runtime libraries.
run_tool() {
	local dir=$1 tool=$2
	shift 2
	loader "$root"
	exec "${LOADER[@]}" "$dir/usr/bin/$tool" "$@"
}

# fetch URL OUT downloads URL to OUT (curl, wget, apt's apt-helper or
# python3, the first found); fails quietly.
fetch() {
	if command -v curl >/dev/null; then
		curl -fsSL --retry 2 --connect-timeout 20 --max-time 300 -o "$2" "$1" 2>/dev/null
	elif command -v wget >/dev/null; then
		wget -q --tries=2 --timeout=20 -O "$2" "$1"
	elif [ -x /usr/lib/apt/apt-helper ]; then
		/usr/lib/apt/apt-helper -o APT::Sandbox::User=root download-file "$1" "$2" >/dev/null 2>&1
	elif command -v python3 >/dev/null; then
		python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$1" "$2" 2>/dev/null
	else
		die "none of curl, wget, apt-helper, python3 found (needed to fetch the glslang 16 .debs)"
	fi
}

# install_root DEST CACHE FILL unpacks a toolchain into DEST unless it is
# complete already. It holds an exclusive lock in CACHE (a concurrent build
# waits, then finds DEST complete); FILL WORK unpacks the toolchain into
# WORK/root, checks it and prints the "package version" lines it used, and
# only then does WORK/root replace DEST.
install_root() {
	local dest=$1 cache=$2 fill=$3 fd work
	mkdir -p "$cache"
	exec {fd}>"$cache/.lock"
	flock "$fd"
	if [ ! -f "$dest/.complete" ]; then
		work=$(mktemp -d "$cache/.work.XXXXXX")
		# shellcheck disable=SC2064
		trap "rm -rf '$work'" EXIT
		mkdir -p "$work/root"
		"$fill" "$work" >"$work/versions"
		mv "$work/versions" "$work/root/.versions"
		touch "$work/root/.complete"
		rm -rf "$dest"
		mv "$work/root" "$dest"
		rm -rf "$work"
		trap - EXIT
	fi
	exec {fd}>&-
}

ensure16() {
	ensure
	[ -f "$root16/.complete" ] && return 0
	command -v dpkg >/dev/null || die "dpkg not found: set GLSLANG16 and SPIRV_TOOLS16_DIR to glslang >= $(lock16 version) / spirv-tools with SPV_KHR_bfloat16"
	[ -n "$(lock16 version)" ] || die "$lock has no glslang16-version line"
	install_root "$root16" "$cache16" fill16
}

# fill16 WORK fetches the glslang 16 .debs of the lock from the first source
# that has them with the lock's sha256 and unpacks them into WORK/root.
fill16() {
	local work=$1 mirror snap ts pkg ver path sha sha1 deb got ok url want have
	mirror=$(detect_mirror)
	snap=${FLASHVK_SNAPSHOT:-https://snapshot.debian.org}
	snap=${snap%/}
	ts=$(lock16 snapshot)
	while read -r pkg ver path sha sha1; do
		deb="$work/${path##*/}"
		ok=
		for url in "$mirror/$path" "$snap/file/$sha1" ${ts:+"$snap/archive/debian/$ts/$path"}; do
			rm -f "$deb"
			if fetch "$url" "$deb"; then
				got=$(sha256sum "$deb" | cut -d' ' -f1)
				if [ "$got" = "$sha" ]; then
					ok=$url
					break
				fi
				warn "$url: sha256 $got differs from the lock's $sha; trying the next source"
			fi
		done
		[ -n "$ok" ] || die "pinned $pkg=$ver ($path, sha256 $sha) is neither on $mirror nor on $snap"
		echo "toolchain.sh: fetched $pkg $ver from $ok" >&2
		dpkg -x "$deb" "$work/root"
		echo "$pkg $ver"
	done < <(lock16_entries)
	want=$(lock16 version)
	have=$(glslang_version "$root" "$work/root/usr/bin/glslangValidator")
	[ "$have" = "$want" ] || die "unpacked glslang 16 reports version '$have', the lock wants '$want'"
	echo "toolchain.sh: installed glslang $have into $root16" >&2
}

ensure() {
	[ -f "$root/.complete" ] && return 0
	command -v apt-get >/dev/null || die "apt-get not found: set GLSLANG and SPIRV_TOOLS_DIR to glslang >= $(lock_glslang_version) / spirv-tools"
	install_root "$root" "$cache" fill15
}

# fill15 WORK downloads the lock's .debs with apt-get under a private apt
# state, checks their sha256 and unpacks them into WORK/root.
fill15() {
	local work=$1 pkg ver sha role deb got cand want have
	apt_setup "$work/apt-state"
	mkdir -p "$work/debs"
	while read -r pkg ver sha role; do
		if ! (cd "$work/debs" && apt-get -qq "${APT_OPTS[@]}" download "$pkg=$ver" >&2 2>/dev/null); then
			if [ "$role" = tool ] || [ "${FLASHVK_TOOLCHAIN_STRICT:-0}" = 1 ]; then
				die "pinned $pkg=$ver ($role) is not available from the $suite archive (now: $(candidate_version "$pkg")). Re-pin with 'scripts/toolchain.sh update-lock' and regenerate the SPIR-V with 'make shaders'."
			fi
			cand=$(candidate_version "$pkg")
			[ -n "$cand" ] || die "$pkg is not in the $suite archive"
			warn "runtime library $pkg=$ver is gone from the archive; using $cand (does not change the SPIR-V; set FLASHVK_TOOLCHAIN_STRICT=1 to refuse)"
			(cd "$work/debs" && apt-get -qq "${APT_OPTS[@]}" download "$pkg=$cand" >&2) || die "download of $pkg=$cand failed"
			echo "$pkg $cand (lock: $ver)"
			continue
		fi
		deb=$(ls "$work/debs/${pkg}_"*.deb 2>/dev/null | head -n1)
		[ -n "$deb" ] || die "apt-get download $pkg=$ver produced no file"
		got=$(sha256sum "$deb" | cut -d' ' -f1)
		[ "$got" = "$sha" ] || die "$pkg=$ver: sha256 $got differs from the lock's $sha"
		echo "$pkg $ver"
	done < <(lock_entries)
	for deb in "$work/debs"/*.deb; do
		dpkg -x "$deb" "$work/root"
	done
	want=$(lock_glslang_version)
	have=$(glslang_version "$work/root" "$work/root/usr/bin/glslangValidator")
	[ "$have" = "$want" ] || die "unpacked glslangValidator reports version '$have', the lock wants '$want'"
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
	have=$(glslang_version "$work/root" "$work/root/usr/bin/glslangValidator")
	echo "glslang-version $have" >>"$out"
	grep -E '^glslang16' "$lock" >>"$out" || true
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
	run_tool "$root" "$@"
	;;
root16)
	ensure16
	echo "$root16"
	;;
run16)
	[ $# -ge 1 ] || die "usage: toolchain.sh run16 TOOL [ARGS...]"
	ensure16
	run_tool "$root16" "$@"
	;;
versions)
	echo "lock ($lock):"
	lock_entries | awk '{printf "  %s %s (%s)\n", $1, $2, $4}'
	echo "  glslang-version $(lock_glslang_version)"
	lock16_entries | awk '{printf "  %s %s (glslang 16 toolchain)\n", $1, $2}'
	echo "  glslang16-version $(lock16 version)"
	ensure
	echo "unpacked ($root):"
	sed 's/^/  /' "$root/.versions"
	ensure16
	echo "unpacked ($root16):"
	sed 's/^/  /' "$root16/.versions"
	;;
update-lock)
	update_lock
	;;
*)
	die "usage: toolchain.sh {root|run TOOL [ARGS]|root16|run16 TOOL [ARGS]|versions|update-lock}"
	;;
esac
