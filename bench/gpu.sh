#!/usr/bin/env bash
# bench/gpu.sh: flashvk's conformance suites and benchmarks on a Vulkan GPU,
# beside PyTorch in the same run when it is there. Run `bench/gpu.sh --help`.
set -uo pipefail

usage() {
	cat <<'EOF'
Usage: bench/gpu.sh MODE[,MODE...] [options]

Runs flashvk's Vulkan conformance suites and benchmarks on this machine's
Vulkan device and writes every result into one fresh directory. Needs a
Vulkan loader (libvulkan1) and the GPU driver's ICD; builds what it needs
from this checkout with Go (go.mod's version) and a C compiler, unless
--bin-dir names prebuilt binaries. PyTorch SDPA (bench/torch_sdpa.py) and
torch.matmul run in the same run when python3 imports torch with CUDA;
the summary says so when they do not.

Modes (comma-separated, run in this order):
  conformance  go test of ./attention and ./internal/vkattn (test binaries,
               -test.v) with FLASHVK_REQUIRE_VULKAN=1: the conformance
               suite on every Vulkan
               kernel the device runs (scalar; cooperative-matrix where it
               has them; fp32/fp16/bf16, forward, backward, determinism),
               the backend's own tests
  grid         per dtype: PyTorch SDPA, then `flashvk bench` (forward and
               backward) on the same grid; `flashvk compare` tables.
               Default tiles (FLASHVK_TUNE=off) unless --tune-cache (the
               environment's FLASHVK_TUNE and FLASHVK_TUNE_CACHE are not used)
  perkernel    `flashvk bench --backward --per-kernel`: each kernel's time
               (d of --dims, N of --seqs or 1024,4096)
  options      each attention option against the plain kernel and against
               PyTorch (bench/torch_sdpa.py with the same flags), per dtype
               and d, at N = the last of --seqs (B = tokens/N), causal:
               plain, plain not causal, window 4095,0, softcap 50, ALiBi,
               dropout 0.1, a four-document boolean mask and a dense N×N
               fp16 bias ([1,1,N,N] .npy files made with numpy; left out
               without it), and a packed batch of --seqlens (with its
               sequences run one by one); then bench/options_table.py's
               table with the targets (options.txt)
  tune         `flashvk tune` (fp32 and fp16 of --dtypes; backward at
               N=2048, forward at N=1024,4096, or N of --seqs) into the
               result directory's tune-v1.json, then the grid with it
  gemm         bench/gemm: the Vulkan tensor-core GEMM ceiling beside
               torch.matmul (cuBLAS), then flash_cm (KHR cooperative matrix)
               and flash_cm2 (NV cooperative matrix 2): checks against
               float64, tile sweep, fp16 forward grid (--dims, --seqs,
               --tokens) beside SDPA flash; each family in its own process
  all          conformance,grid,perkernel,gemm
  build        only build the binaries into --bin-dir (for a machine
               without Go), nothing else

Options:
  -o, --out DIR         result directory; it must not exist or be empty
                        (default: bench/results/DATE-DEVICE, DATE the UTC
                        date YYYY-MM-DD, DEVICE the Vulkan device's name as
                        a slug, e.g. 2026-11-22-nvidia-h200; -2, -3, ... is
                        appended when it exists)          [FLASHVK_RESULTS_DIR]
      --bin-dir DIR     use the prebuilt flashvk, attention.test,
                        vkattn.test and gemm found there instead of building;
                        with MODE build: where to build them  [FLASHVK_BIN_DIR]
      --device SEL      Vulkan device: index, vendor (nvidia, amd, intel,
                        lavapipe), type or name substring   [FLASHVK_DEVICE]
      --dtypes LIST     grid, perkernel, tune: float32,float16,bfloat16
                        (default: all three; fp32/fp16/bf16 also accepted)
      --dims LIST       head dims (default 64,128)
      --seqs LIST       sequence lengths N = Nq = Nk
                        (default 512,1024,2048,4096,8192,16384)
      --causal C        true, false or both (default both)
      --tokens N        tokens per cell B·N: B = tokens/N (default 16384)
      --hidden N        H·d: H = hidden/d (default 2048; gemm keeps 2048)
      --iters N         timed calls per cell (default 30)
      --warmup N        untimed calls per cell (default 10; flashvk also
                        warms up for at least 500 ms)
      --rotate N        input sets cycled through (default 2)
      --fwd-only        grid, perkernel, tune: forward only
      --tests REGEX     conformance: only tests matching REGEX (-test.run)
      --tune-cache FILE grid, perkernel: use this tune cache
      --tune-budget D   tune: time limit per direction, Go duration (default 4m)
      --tune-candidates K  tune: candidates per key and family, the default
                        and its nearest neighbours (default 12; 0: all)
      --tune-family LIST  tune: only these kernel families (flashvk tune
                        --family: flash, flash_cm, bwd_dkdv, bwd_dq,
                        bwd_cm_dkdv, bwd_cm_dq)
      --gemm-sizes LIST gemm: GEMM sizes M=N=K (default 4096,8192)
      --seqlens LIST    options: the packed batch's lengths (default
                        128,4096,256,2048,512,1024,3072,768,1536,384,640,
                        896,160,200,300,200: 16 sequences, 16,220 tokens)
      --python PATH     the Python with torch (default python3) [FLASHVK_PYTHON]
      --no-torch        do not run PyTorch
      --step-timeout S  stop any single step after S seconds (default: none)
      --max-files N     leave at most N files in the result directory: the
                        least important ones are packed into rest.tar.gz
                        (N >= 3; default: no limit)       [FLASHVK_MAX_FILES]
  -h, --help            this text

Files in the result directory (only those of the modes run):
  summary.txt          what the script printed: commit, machine (nvidia-smi
                       when present, flashvk devices), PyTorch or why not,
                       each step's command, exit status and time, test
                       counts, worst 16-bit error/bound, compare tables
  log.txt              every step's full output except the test logs
  conformance.log.gz   conformance: both test binaries' -test.v output
  torch-DTYPE.json     grid, tune: PyTorch SDPA (flashvk-bench/1 schema,
                       docs/results-schema.md); also gemm (fp16 forward)
  flashvk-DTYPE.json   grid: flashvk bench, default tiles
  flashvk-tuned-DTYPE.json  tune: flashvk bench with tune-v1.json
  compare.txt          grid, tune: flashvk compare --format plain per dtype
                       (PyTorch first), when a dtype has two files or more
  tune-v1.json         tune: the tune cache (FLASHVK_TUNE_CACHE format)
  perkernel.json       perkernel: flashvk bench --per-kernel
  options/             options: flashvk-DTYPE-POINT.json and
                       torch-DTYPE-POINT.json (POINT: plain, full, window,
                       softcap, alibi, dropout, doc, bias, packed, alone)
  options.txt          options: the table and the targets
  torch-mm.json        gemm: torch.matmul fp16/bf16 at --gemm-sizes
  bench-gemm.json      gemm: GEMM variants
  bench-cm.json, attn-cm.json    gemm: flash_cm probe, checks, sweep, grid
  bench-cm2.json, attn-cm2.json  gemm: flash_cm2, the same
  rest.tar.gz          with --max-files, the files packed to stay under it

Examples:
  bench/gpu.sh all
  bench/gpu.sh conformance,grid --dtypes float16 --out /tmp/run1
  bench/gpu.sh grid --dims 128 --seqs 4096 --causal false --fwd-only
  bench/gpu.sh build --bin-dir /tmp/flashvk-bin   # then, on the GPU machine:
  FLASHVK_BIN_DIR=/tmp/flashvk-bin bench/gpu.sh all --max-files 8
Exit status: 0 when every step passed, 1 when one failed (the run goes on
to the next step) or nothing could run, 2 for a bad option, 130 when
interrupted (the summary says so).
EOF
}

die_usage() {
	printf 'bench/gpu.sh: %s\n' "$*" >&2
	printf "Run 'bench/gpu.sh --help' for the modes and options.\n" >&2
	exit 2
}
die() {
	printf 'bench/gpu.sh: %s\n' "$*" >&2
	exit 1
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 1
cd "$root" || exit 1

# ---- options -------------------------------------------------------------
out=${FLASHVK_RESULTS_DIR:-}
bin_dir=${FLASHVK_BIN_DIR:-}
device_sel=${FLASHVK_DEVICE:-}
dtypes=float32,float16,bfloat16
dims=64,128
seqs=512,1024,2048,4096,8192,16384
seqs_given=0
causal=both
tokens=16384
hidden=2048
iters=30
warmup=10
rotate=2
backward=1
tests=
tune_cache=
tune_budget=4m
tune_candidates=12
tune_family=
gemm_sizes=4096,8192
seqlens=128,4096,256,2048,512,1024,3072,768,1536,384,640,896,160,200,300,200
python=${FLASHVK_PYTHON:-python3}
use_torch=1
step_timeout=
max_files=${FLASHVK_MAX_FILES:-}

[ $# -gt 0 ] || die_usage "missing MODE (conformance, grid, perkernel, options, tune, gemm, all or build)"
case $1 in
-h | --help)
	usage
	exit 0
	;;
-*) die_usage "the first argument is the MODE, not an option: $1" ;;
esac
modes_arg=$1
shift

need_arg() {
	if [ $# -lt 2 ] || [ -z "$2" ]; then
		die_usage "option $1 needs a value"
	fi
}
while [ $# -gt 0 ]; do
	opt=$1 val=
	case $opt in
	--fwd-only=* | --no-torch=* | --help=*) die_usage "option ${opt%%=*} takes no value" ;;
	--*=*)
		val=${opt#*=}
		opt=${opt%%=*}
		set -- "$opt" "$val" "${@:2}"
		;;
	esac
	case $opt in
	-h | --help)
		usage
		exit 0
		;;
	--fwd-only) backward=0 ;;
	--no-torch) use_torch=0 ;;
	-o | --out | --bin-dir | --device | --dtypes | --dims | --seqs | --causal | --tokens | --hidden | \
		--iters | --warmup | --rotate | --tests | --tune-cache | --tune-budget | --tune-candidates | --tune-family | \
		--gemm-sizes | --seqlens | --python | --step-timeout | --max-files)
		need_arg "$@"
		val=$2
		shift
		case $opt in
		-o | --out) out=$val ;;
		--bin-dir) bin_dir=$val ;;
		--device) device_sel=$val ;;
		--dtypes) dtypes=$val ;;
		--dims) dims=$val ;;
		--seqs)
			seqs=$val
			seqs_given=1
			;;
		--causal) causal=$val ;;
		--tokens) tokens=$val ;;
		--hidden) hidden=$val ;;
		--iters) iters=$val ;;
		--warmup) warmup=$val ;;
		--rotate) rotate=$val ;;
		--tests) tests=$val ;;
		--tune-cache) tune_cache=$val ;;
		--tune-budget) tune_budget=$val ;;
		--tune-candidates) tune_candidates=$val ;;
		--tune-family) tune_family=$val ;;
		--gemm-sizes) gemm_sizes=$val ;;
		--seqlens) seqlens=$val ;;
		--python) python=$val ;;
		--step-timeout) step_timeout=$val ;;
		--max-files) max_files=$val ;;
		esac
		;;
	*) die_usage "unknown option: $opt" ;;
	esac
	shift
done

# Modes.
declare -A want=()
IFS=, read -ra mode_list <<<"$modes_arg"
[ ${#mode_list[@]} -gt 0 ] || die_usage "missing MODE"
for m in "${mode_list[@]}"; do
	case $m in
	conformance | grid | perkernel | options | tune | gemm | build) want[$m]=1 ;;
	all) want[conformance]=1 want[grid]=1 want[perkernel]=1 want[gemm]=1 ;;
	*) die_usage "unknown mode: '$m' (want conformance, grid, perkernel, options, tune, gemm, all or build)" ;;
	esac
done
on() { [ -n "${want[$1]:-}" ]; }
if on build && [ ${#want[@]} -gt 1 ]; then
	die_usage "mode build only builds: give it alone"
fi

# Values.
is_uint() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }
is_list() { [[ $1 =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]]; }
for pair in "tokens:$tokens" "hidden:$hidden" "iters:$iters" "rotate:$rotate"; do
	is_uint "${pair#*:}" || die_usage "--${pair%%:*} '${pair#*:}': want a positive integer"
done
[[ $warmup =~ ^[0-9]+$ ]] || die_usage "--warmup '$warmup': want an integer >= 0"
[[ $tune_candidates =~ ^[0-9]+$ ]] || die_usage "--tune-candidates '$tune_candidates': want an integer >= 0 (0: all)"
[ -z "$tune_family" ] || [[ $tune_family =~ ^[a-z_0-9]+(,[a-z_0-9]+)*$ ]] ||
	die_usage "--tune-family '$tune_family': want comma-separated kernel families, e.g. bwd_cm_dkdv"
for pair in "dims:$dims" "seqs:$seqs" "gemm-sizes:$gemm_sizes" "seqlens:$seqlens"; do
	is_list "${pair#*:}" || die_usage "--${pair%%:*} '${pair#*:}': want comma-separated positive integers, e.g. 64,128"
done
case $causal in true | false | both) ;; *) die_usage "--causal '$causal': want true, false or both" ;; esac
[[ $tune_budget =~ ^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$ ]] || die_usage "--tune-budget '$tune_budget': want a Go duration, e.g. 4m or 90s"
[ -z "$step_timeout" ] || is_uint "$step_timeout" || die_usage "--step-timeout '$step_timeout': want seconds, a positive integer"
if [ -n "$max_files" ]; then
	if ! is_uint "$max_files" || [ "$max_files" -lt 3 ]; then
		die_usage "--max-files '$max_files': want an integer >= 3"
	fi
fi
if [ -n "$tune_cache" ]; then
	[ -f "$tune_cache" ] || die_usage "--tune-cache $tune_cache: no such file"
	tune_cache=$(cd "$(dirname "$tune_cache")" && pwd)/$(basename "$tune_cache")
fi
if [ -n "$tune_cache" ] && on tune; then
	die_usage "--tune-cache is for grid and perkernel; mode tune writes its own cache"
fi
dt_list=()
IFS=, read -ra raw_dtypes <<<"$dtypes"
for t in "${raw_dtypes[@]}"; do
	case $t in
	float32 | fp32 | f32) t=float32 ;;
	float16 | fp16 | f16) t=float16 ;;
	bfloat16 | bf16) t=bfloat16 ;;
	*) die_usage "--dtypes: unknown dtype '$t' (want float32, float16, bfloat16)" ;;
	esac
	dt_list+=("$t")
done
[ ${#dt_list[@]} -gt 0 ] || die_usage "--dtypes is empty"
if ! on build && [ -n "$out" ] && [ -e "$out" ] && { [ ! -d "$out" ] || [ -n "$(ls -A "$out")" ]; }; then
	die_usage "--out $out exists and is not an empty directory (results go to a fresh one)"
fi
if on build && [ -z "$bin_dir" ]; then
	die_usage "mode build needs --bin-dir DIR (or FLASHVK_BIN_DIR)"
fi
if [ -n "$device_sel" ]; then
	export FLASHVK_DEVICE=$device_sel
fi
export FLASHVK_REQUIRE_VULKAN=1 PYTHONUNBUFFERED=1

# ---- binaries ------------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/flashvk-gpu.XXXXXX") || die "mktemp failed"
trap 'rm -rf "$tmp"' EXIT

need_bins=(flashvk)
on conformance && need_bins+=(attention.test vkattn.test)
on gemm && need_bins+=(gemm)
on build && need_bins=(flashvk attention.test vkattn.test gemm)

build_bin() { # name dir
	local name=$1 dir=$2
	local -a cmd
	case $name in
	flashvk) cmd=(go build -o "$dir/flashvk" ./cmd/flashvk) ;;
	attention.test) cmd=(go test -c -o "$dir/attention.test" ./attention) ;;
	vkattn.test) cmd=(go test -c -o "$dir/vkattn.test" ./internal/vkattn) ;;
	gemm) cmd=(go build -o "$dir/gemm" ./bench/gemm) ;;
	esac
	printf '  %s\n' "${cmd[*]}"
	"${cmd[@]}" || die "build of $name failed (needs Go as go.mod says, and a C compiler for cgo)"
}

built_here=0
if on build; then
	command -v go >/dev/null || die "go not found: install Go (go.mod: $(sed -n 's/^go //p' go.mod)) to build"
	mkdir -p "$bin_dir" || die "cannot create $bin_dir"
	bin=$(cd "$bin_dir" && pwd)
	echo "building into $bin:"
	for b in "${need_bins[@]}"; do build_bin "$b" "$bin"; done
	echo "done; run with: FLASHVK_BIN_DIR=$bin bench/gpu.sh MODE (from a checkout of the same commit)"
	exit 0
elif [ -n "$bin_dir" ]; then
	bin=$(cd "$bin_dir" 2>/dev/null && pwd) || die "--bin-dir $bin_dir: no such directory"
	for b in "${need_bins[@]}"; do
		[ -x "$bin/$b" ] || die "$bin/$b is missing: build it with 'bench/gpu.sh build --bin-dir $bin_dir'"
	done
else
	command -v go >/dev/null || die "go not found: install Go (go.mod: $(sed -n 's/^go //p' go.mod)), or give --bin-dir with prebuilt binaries"
	bin=$tmp/bin
	mkdir -p "$bin"
	echo "building from $root:"
	for b in "${need_bins[@]}"; do build_bin "$b" "$bin"; done
	built_here=1
fi
fvk=$bin/flashvk

# ---- device --------------------------------------------------------------
# The device flashvk opens: device.Select's rule (internal/device) applied to
# `flashvk devices --json` (indented: the fields of a device are at 6 spaces).
"$fvk" devices --json >"$tmp/devices.json" 2>"$tmp/devices.err" || {
	cat "$tmp/devices.err" >&2
	die "flashvk devices failed"
}
pick=$(awk -v sel="${FLASHVK_DEVICE:-}" '
function val(line) { sub(/^ *"[a-z_]+": */, "", line); sub(/,$/, "", line); gsub(/^"|"$/, "", line); return line }
/^    [{]/ { delete f; next }
/^      "[a-z_]+": / { k = $0; sub(/^ *"/, "", k); sub(/".*/, "", k); f[k] = val($0); next }
/^    [}]/ {
	if (f["backend"] != "vulkan") next
	s = tolower(sel); n = tolower(f["name"]); ok = 0
	if (s ~ /^[0-9]+$/) ok = (f["index"] == s)
	else if (s == "" || s == "best" || s == "any" || s == "default") ok = 1
	else if (s ~ /^(nvidia|amd|intel|arm|qualcomm|apple|imgtec)$/) ok = (f["vendor"] == s)
	else if (s == "lavapipe" || s == "llvmpipe") ok = (index(n, "llvmpipe") > 0 || f["driver_name"] == "llvmpipe")
	else if (s ~ /^(cpu|discrete|integrated|virtual)$/) ok = (f["type"] == s)
	else if (s == "gpu") ok = (f["type"] ~ /^(discrete|integrated|virtual)$/)
	else ok = (index(n, s) > 0)
	if (!ok) next
	r = (f["type"] == "discrete") ? 4 : (f["type"] == "integrated") ? 3 : (f["type"] == "virtual") ? 2 : (f["type"] == "cpu") ? 1 : 0
	m = f["device_local_bytes"] + 0
	if (!found || r > br || (r == br && m > bm)) { found = 1; br = r; bm = m; best = f["index"] "\t" f["type"] "\t" f["runnable"] "\t" f["name"] "\t" f["error"] }
}
END { if (found) print best }' "$tmp/devices.json")
if [ -z "$pick" ]; then
	"$fvk" devices >&2
	if [ -n "${FLASHVK_DEVICE:-}" ]; then
		die "no Vulkan device matches '$FLASHVK_DEVICE' (list above)"
	fi
	die "no Vulkan device: install the loader (libvulkan1) and the GPU's Vulkan driver; if the driver's ICD JSON is not in the loader's search path, point VK_DRIVER_FILES at it (README, 'On a GPU')"
fi
IFS=$'\t' read -r dev_index dev_type dev_runnable dev_name dev_error <<<"$pick"
if [ "$dev_runnable" != true ]; then
	die "flashvk does not run on Vulkan device $dev_index, $dev_name: ${dev_error:-see 'flashvk devices'}"
fi
# Pin the device for every process of the run, by index.
export FLASHVK_DEVICE=$dev_index
slug=$(printf '%s' "$dev_name" | tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9]+/-/g; s/^-+//; s/-+$//')
[ -n "$slug" ] || slug=vulkan

# ---- result directory ----------------------------------------------------
if [ -z "$out" ]; then
	base=bench/results/$(date -u +%F)-$slug
	out=$base
	k=2
	while [ -e "$out" ]; do
		out=$base-$k
		k=$((k + 1))
	done
fi
mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd)
summary=$out/summary.txt
log=$out/log.txt
: >"$summary"
failed=0
child='' step_dest=$log clog=''
# shellcheck disable=SC2317 # called by the trap
interrupted() {
	trap - INT TERM
	if [ -n "$child" ]; then
		kill -TERM "$child" 2>/dev/null
		wait "$child" 2>/dev/null
		[ ! -f "$tmp/step.out" ] || cat "$tmp/step.out" >>"$step_dest"
	fi
	[ -z "$clog" ] || [ -f "$out/conformance.log.gz" ] || gzip -c "$clog" >"$out/conformance.log.gz"
	say "INTERRUPTED (signal): the results of this run are incomplete"
	exit 130
}
trap interrupted INT TERM

say() { printf '%s\n' "$*" | tee -a "$summary"; }
show() { tee -a "$summary"; } # stdin to the terminal and the summary
rel() { local p=$1; p=${p//"$out"\//}; p=${p//"$bin"\//}; p=${p//"$root"\//}; printf '%s' "$p"; }

# step NAME LOG DIR CMD...: runs CMD in DIR (relative to the repository),
# its stdout and stderr into $tmp/step.out and appended to LOG; prints the
# command, exit status and time. Returns CMD's status.
step() {
	local name=$1 dest=$2 dir=$3 rc t0=$SECONDS
	shift 3
	local -a cmd=("$@")
	step_dest=$dest
	[ -z "$step_timeout" ] || cmd=(timeout -k 10 "$step_timeout" "$@")
	local shown=()
	for a in "$@"; do shown+=("$(rel "$a")"); done
	say "-- $name: ${shown[*]}"
	printf '\n### %s: %s\n' "$name" "${shown[*]}" >>"$dest"
	# In the background and waited for, so that a signal to this script
	# is handled at once (the trap stops the step).
	(cd "$dir" && exec "${cmd[@]}") >"$tmp/step.out" 2>&1 &
	child=$!
	wait "$child"
	rc=$?
	child=
	cat "$tmp/step.out" >>"$dest"
	if [ $rc -eq 0 ]; then
		say "   ok ($((SECONDS - t0)) s)"
	else
		local why=
		[ -z "$step_timeout" ] || { [ $rc -ne 124 ] && [ $rc -ne 137 ]; } || why=", stopped by --step-timeout $step_timeout s"
		say "   FAILED: exit status $rc$why ($((SECONDS - t0)) s)"
		failed=1
	fi
	return $rc
}

smi() { # nvidia-smi fields, when nvidia-smi is there
	command -v nvidia-smi >/dev/null || return 0
	nvidia-smi --query-gpu="$1" --format=csv 2>&1 | show
}

# ---- header --------------------------------------------------------------
commit=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[ -z "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ] || commit="$commit (with uncommitted changes)"
say "flashvk bench/gpu.sh ${modes_arg}  $(date -u +%FT%TZ)"
say "commit     $commit"
if [ $built_here -eq 1 ]; then
	say "binaries   built from this checkout with $(go version | cut -d' ' -f3-)"
else
	say "binaries   prebuilt, $bin"
fi
say "results    $(rel "$out")"
say "device     $dev_index: $dev_name ($dev_type), FLASHVK_DEVICE=$dev_index"
say "host       $(uname -srm), $(nproc 2>/dev/null || echo ?) CPUs"
smi name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw
"$fvk" devices 2>&1 | show

# PyTorch.
torch_ok=0
if [ $use_torch -eq 0 ]; then
	say "PyTorch    not run (--no-torch)"
elif ! command -v "$python" >/dev/null; then
	say "PyTorch    not run: $python not found (--python, FLASHVK_PYTHON)"
elif tinfo=$("$python" -c '
import sys
try:
    import torch
except Exception as e:
    print("torch cannot be imported:", e); sys.exit(1)
if not torch.cuda.is_available():
    print(f"torch {torch.__version__} sees no CUDA device"); sys.exit(1)
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
' 2>&1); then
	torch_ok=1
	say "PyTorch    $tinfo (CUDA device 0: CUDA_VISIBLE_DEVICES picks another)"
else
	say "PyTorch    not run: $(printf '%s' "$tinfo" | tail -1) ($python)"
fi

# ---- conformance ---------------------------------------------------------
worst_ratio() { # the largest rel_l2/tol of a -test.v log's "rel_l2 X (tol Y)" lines with tol > 1e-5
	awk '{ r = ""; t = ""; for (i = 1; i < NF; i++) { if ($i == "rel_l2") r = $(i + 1); if ($i == "(tol") { t = $(i + 1); sub(/\).*/, "", t) } }
		if (r != "" && t + 0 > 1e-5) { q = (r + 0) / (t + 0); if (q > w) w = q; n++ } }
		END { if (n) printf "%.2f over %d checks\n", w, n; else print "no 16-bit checks in this run" }' "$@"
}
if on conformance; then
	say ""
	say "== conformance (FLASHVK_REQUIRE_VULKAN=1)"
	clog=$tmp/conformance.log
	: >"$clog"
	run=()
	[ -z "$tests" ] || run=(-test.run "$tests")
	step "go test ./internal/vkattn" "$clog" internal/vkattn \
		"$bin/vkattn.test" -test.v -test.timeout 60m "${run[@]}"
	step "go test ./attention" "$clog" attention \
		"$bin/attention.test" -test.v -test.timeout 60m "${run[@]}"
	say "   tests: $(grep -c -- '--- PASS' "$clog") passed, $(grep -c -- '--- FAIL' "$clog") failed, $(grep -c -- '--- SKIP' "$clog") skipped (subtests included)"
	grep -- '--- FAIL' "$clog" | head -20 | show
	# A skipped test's reason is the line before its "--- SKIP".
	awk '/--- SKIP/ { t = $3; sub(/^ +/, "", prev); print "   skip " t ": " substr(prev, 1, 200) } { prev = $0 }' "$clog" |
		head -10 | show
	say "   worst 16-bit error/bound (the FlashAttention-2 rule; must be <= 1): $(worst_ratio "$clog")"
	grep -E 'runs (flash|bwd)' "$clog" | sed 's/^ */   /' | head -12 | show
	gzip -c "$clog" >"$out/conformance.log.gz"
fi

# ---- grid and tune -------------------------------------------------------
sdpa_backend() { # the PyTorch SDPA backend beside flashvk for a dtype
	case $1 in
	float32) echo efficient ;; # FlashAttention-2 has no fp32
	*) echo flash ;;
	esac
}
spaced() { printf '%s' "${1//,/ }"; }
bwd_flag=()
[ $backward -eq 0 ] || bwd_flag=(--backward)
bench_common=(--backend vulkan "${bwd_flag[@]}" --dim "$dims" --causal="$causal" --tokens "$tokens"
	--hidden "$hidden" --iters "$iters" --warmup "$warmup" --rotate "$rotate" --progress lines)

torch_grid() { # dtype [--backward]: PyTorch SDPA on the grid into torch-DTYPE.json, once per run
	local dt=$1 f=$out/torch-$1.json
	shift
	[ $torch_ok -eq 1 ] || return 0
	[ -f "$f" ] && return 0
	# shellcheck disable=SC2046 # word splitting of the lists is wanted
	step "PyTorch SDPA $(sdpa_backend "$dt") $dt" "$log" . "$python" bench/torch_sdpa.py --dtype "$dt" \
		--backend "$(sdpa_backend "$dt")" "$@" --dim $(spaced "$dims") --seq $(spaced "$seqs") --causal "$causal" \
		--tokens "$tokens" --hidden "$hidden" --iters "$iters" --warmup "$warmup" --rotate "$rotate" --json "$f"
}

flashvk_grid() { # dtype label: flashvk bench on the grid into flashvk[-label]-DTYPE.json
	local dt=$1 name=flashvk${2:+-$2}-$1.json
	step "flashvk bench $dt${2:+ ($2)}" "$log" . "$fvk" bench --dtype "$dt" --seq "$seqs" "${bench_common[@]}" \
		--json "$out/$name"
	# flashvk's notes on a series with a clock step, and errors.
	grep -E 'still have a step|[Ee]rror' "$tmp/step.out" | head -5 | sed 's/^/   /' | show
}

compare_dtype() { # dtype: flashvk compare of the files of one dtype, into compare.txt
	local dt=$1 files=() f
	for f in "torch-$dt.json" "flashvk-$dt.json" "flashvk-tuned-$dt.json"; do
		[ -s "$out/$f" ] && files+=("$f")
	done
	if [ ${#files[@]} -lt 2 ]; then
		say "   compare $dt: only ${files[*]:-no file}; flashvk's table:"
		grep -E '^ +(dir|fwd|bwd) ' "$tmp/step.out" | show
		return
	fi
	{
		printf '== %s: %s\n' "$dt" "${files[*]}"
		(cd "$out" && "$fvk" compare --format plain "${files[@]}") 2>&1
		echo
	} >>"$out/compare.txt"
	(cd "$out" && "$fvk" compare --format plain "${files[@]}") 2>&1 | show
}

run_grid() { # label (empty for default tiles, "tuned")
	local dt
	for dt in "${dt_list[@]}"; do
		torch_grid "$dt" "${bwd_flag[@]}" # first: the GPU's clocks are up when flashvk starts
		flashvk_grid "$dt" "$1"
		compare_dtype "$dt"
	done
}

if on grid; then
	say ""
	if [ -n "$tune_cache" ]; then
		say "== grid (tune cache $tune_cache)"
		FLASHVK_TUNE=on FLASHVK_TUNE_CACHE=$tune_cache run_grid ""
	else
		say "== grid (default tiles: FLASHVK_TUNE=off)"
		FLASHVK_TUNE=off run_grid ""
	fi
fi

# ---- perkernel -----------------------------------------------------------
if on perkernel; then
	say ""
	say "== perkernel"
	pk_seqs=$seqs
	[ $seqs_given -eq 1 ] || pk_seqs=1024,4096
	dt_csv=$(
		IFS=,
		echo "${dt_list[*]}"
	)
	if [ -n "$tune_cache" ]; then
		pk_env=(env FLASHVK_TUNE=on FLASHVK_TUNE_CACHE="$tune_cache")
	else
		pk_env=(env FLASHVK_TUNE=off)
	fi
	step "flashvk bench --per-kernel" "$log" . "${pk_env[@]}" "$fvk" bench --dtype "$dt_csv" --seq "$pk_seqs" \
		"${bench_common[@]}" --per-kernel --json "$out/perkernel.json"
	awk -v p="note: $dev_name " 'index($0, p) == 1 && / kernel .*: median / { print "   " substr($0, length(p) + 1) }' \
		"$tmp/step.out" | show
fi

# ---- options -------------------------------------------------------------
# opt_point NAME FLAGS...: one option point on flashvk, then on PyTorch
# (first: the GPU's clocks are up when flashvk starts), for every dtype.
opt_point() {
	local name=$1 dt tb
	shift
	for dt in "${dt_list[@]}"; do
		if [ $torch_ok -eq 1 ]; then
			tb=()
			# Plain problems run the grid's SDPA backend; with an option
			# torch_sdpa.py picks (best: the fastest that takes it).
			[[ $name != plain && $name != full ]] || tb=(--backend "$(sdpa_backend "$dt")")
			# shellcheck disable=SC2046 # word splitting of the lists is wanted
			step "PyTorch $name $dt" "$log" . "$python" bench/torch_sdpa.py --dtype "$dt" "${tb[@]}" "${bwd_flag[@]}" \
				--dim $(spaced "$dims") --hidden "$hidden" --iters "$iters" --warmup "$warmup" --rotate "$rotate" \
				"$@" --json "$opt_dir/torch-$dt-$name.json"
		fi
		step "flashvk $name $dt" "$log" . "$fvk" bench --dtype "$dt" --backend vulkan "${bwd_flag[@]}" --dim "$dims" \
			--hidden "$hidden" --iters "$iters" --warmup "$warmup" --rotate "$rotate" --progress lines "$@" \
			--json "$opt_dir/flashvk-$dt-$name.json"
	done
}
if on options; then
	say ""
	n_opt=${seqs##*,}
	say "== options (N = $n_opt, B = $tokens/N, H = $hidden/d; causal unless said)"
	opt_dir=$out/options
	mkdir -p "$opt_dir"
	grid=(--seq "$n_opt" --tokens "$tokens")
	opt_point plain "${grid[@]}" --causal=true
	opt_point full "${grid[@]}" --causal=false
	opt_point window "${grid[@]}" --causal=true --window 4095,0
	opt_point softcap "${grid[@]}" --causal=true --softcap 50
	opt_point alibi "${grid[@]}" --causal=true --alibi
	opt_point dropout "${grid[@]}" --causal=true --dropout 0.1
	if ! "$python" -c 'import numpy' 2>/dev/null; then
		say "   the mask and bias points are left out: $python has no numpy"
	elif step "the mask and bias files" "$log" . "$python" bench/options_table.py --make-inputs "$tmp/options" --seq "$n_opt"; then
		opt_point doc "${grid[@]}" --causal=true --mask "$tmp/options/doc.npy"
		opt_point bias "${grid[@]}" --causal=true --bias "$tmp/options/bias.npy"
	fi
	opt_point packed --seqlens "$seqlens" --causal=true
	# The packed batch's sequences one by one (B = 1, each length once;
	# the table sums them over the batch). flashvk only.
	lens=$(tr ',' '\n' <<<"$seqlens" | sort -nu | paste -sd,)
	for dt in "${dt_list[@]}"; do
		step "flashvk alone $dt" "$log" . "$fvk" bench --dtype "$dt" --backend vulkan "${bwd_flag[@]}" --dim "$dims" \
			--hidden "$hidden" --iters "$iters" --warmup "$warmup" --rotate "$rotate" --progress lines \
			--seq "$lens" --batch 1 --causal=true --json "$opt_dir/flashvk-$dt-alone.json"
	done
	if command -v "$python" >/dev/null; then
		"$python" bench/options_table.py "$opt_dir" >"$out/options.txt" 2>&1 || failed=1
		show <"$out/options.txt"
	else
		say "   no table: $python not found (the JSON files are in $(rel "$opt_dir"))"
	fi
fi

# ---- tune ----------------------------------------------------------------
if on tune; then
	say ""
	say "== tune"
	tdt=()
	for dt in "${dt_list[@]}"; do
		case $dt in
		float32) tdt+=(f32) ;;
		float16) tdt+=(f16) ;;
		bfloat16) say "   bfloat16 is not tuned (flashvk tune: f16 and f32): its kernels keep the default tiles" ;;
		esac
	done
	cache=$out/tune-v1.json
	if [ ${#tdt[@]} -gt 0 ]; then
		tdt_csv=$(
			IFS=,
			echo "${tdt[*]}"
		)
		tune_common=(--dtype "$tdt_csv" --dim "$dims" --causal="$causal" --tokens "$tokens" --hidden "$hidden"
			--max-candidates "$tune_candidates" --budget "$tune_budget" --cache "$cache")
		[ -z "$tune_family" ] || tune_common+=(--family "$tune_family")
		n_bwd=2048 n_fwd=1024,4096
		[ $seqs_given -eq 0 ] || n_bwd=$seqs n_fwd=$seqs
		tune_bwd=$backward tune_fwd=1
		if [ -n "$tune_family" ]; then # only the directions of the families named
			[[ ,$tune_family =~ ,bwd ]] || tune_bwd=0
			[[ ,$tune_family =~ ,flash ]] || tune_fwd=0
		fi
		[ $tune_bwd -eq 0 ] || step "flashvk tune bwd" "$log" . "$fvk" tune --dir bwd --seq "$n_bwd" "${tune_common[@]}"
		[ $tune_fwd -eq 0 ] || step "flashvk tune fwd" "$log" . "$fvk" tune --dir fwd --seq "$n_fwd" "${tune_common[@]}"
		if [ -f "$cache" ]; then
			"$fvk" tune --show --cache "$cache" 2>&1 | show
		fi
	fi
	if [ -f "$cache" ]; then
		say "-- the grid with $(rel "$cache")"
		FLASHVK_TUNE=on FLASHVK_TUNE_CACHE=$cache run_grid tuned
	else
		say "   no tune cache was written: the tuned grid is not run"
		failed=1
	fi
fi

# ---- gemm ----------------------------------------------------------------
if on gemm; then
	say ""
	say "== gemm (bench/gemm)"
	g_torch=()
	if [ $torch_ok -eq 1 ]; then
		# shellcheck disable=SC2046
		step "torch.matmul" "$log" . "$python" bench/gemm/torch_matmul.py --sizes $(spaced "$gemm_sizes") \
			--json "$out/torch-mm.json" && g_torch+=(-torch-mm "$out/torch-mm.json")
		# flash_cm's grid beside SDPA flash fp16 forward: the grid's file, or
		# a forward-only run when there is none. bench/gemm's grid has
		# H = 2048/d: with another --hidden the shapes would not match.
		if [ "$hidden" != 2048 ]; then
			say "   SDPA is left out of gemm's attention table: --hidden $hidden, gemm's grid has H·d = 2048"
		else
			torch_grid float16
		fi
		if [ "$hidden" = 2048 ] && [ -f "$out/torch-float16.json" ] &&
			"$python" -c 'import json, sys
d = json.load(open(sys.argv[1]))
d["results"] = [r for r in d["results"] if r["direction"] == "fwd"]
json.dump(d, open(sys.argv[2], "w"))' "$out/torch-float16.json" "$tmp/torch-sdpa-fwd.json"; then
			g_torch+=(-torch-sdpa "$tmp/torch-sdpa-fwd.json")
		fi
	fi
	g=("$bin/gemm" -out "$out" -gemm-sizes "$gemm_sizes" -dims "$dims" -seqs "$seqs" -tokens "$tokens"
		-iters "$iters" "${g_torch[@]}")
	[ "$dev_type" != cpu ] || g+=(-quick) # a CPU device: the small check shapes only
	step "GEMM ceiling" "$log" . "${g[@]}" -mode gemm -tag gemm
	step "flash_cm" "$log" . "${g[@]}" -mode check,sweep,grid -only flash_cm/ -tag cm
	step "flash_cm2" "$log" . "${g[@]}" -mode check,sweep,grid -only flash_cm2 -tag cm2
	merge=()
	for f in bench-gemm.json bench-cm.json bench-cm2.json; do
		[ -f "$out/$f" ] && merge+=("$out/$f")
	done
	if [ ${#merge[@]} -gt 0 ]; then
		m=$(
			IFS=,
			echo "${merge[*]}"
		)
		"$bin/gemm" -mode table -merge "$m" -iters "$iters" -tokens "$tokens" "${g_torch[@]}" 2>&1 | show
	fi
fi

# ---- end -----------------------------------------------------------------
say ""
smi clocks.sm,clocks.max.sm,temperature.gpu,power.draw
if [ -n "$max_files" ]; then
	mapfile -t files < <(cd "$out" && ls -A)
	if [ ${#files[@]} -gt "$max_files" ]; then
		# Most important first; everything after the first max_files-1 is packed.
		order=()
		for pat in summary.txt compare.txt options.txt 'flashvk-*.json' 'torch-*.json' tune-v1.json perkernel.json \
			'attn-*.json' 'bench-*.json' torch-mm.json conformance.log.gz log.txt; do
			for f in "${files[@]}"; do
				# shellcheck disable=SC2053 # $pat is a glob pattern
				[[ $f == $pat ]] && [[ " ${order[*]} " != *" $f "* ]] && order+=("$f")
			done
		done
		for f in "${files[@]}"; do
			[[ " ${order[*]} " == *" $f "* ]] || order+=("$f")
		done
		pack=("${order[@]:max_files-1}")
		say "--max-files $max_files: ${#files[@]} files; packing into rest.tar.gz: ${pack[*]}"
		(cd "$out" && tar czf rest.tar.gz "${pack[@]}" && rm -f "${pack[@]}") || failed=1
	fi
fi
if [ $failed -eq 0 ]; then
	say "all steps passed; results in $(rel "$out")"
else
	say "SOME STEPS FAILED (see above and log.txt); results in $(rel "$out")"
fi
exit $failed
