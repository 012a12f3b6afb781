#!/usr/bin/env bash
# scripts/gpu_check.sh — the one command to run on a GPU machine: configure (Release, sm_90),
# build the CUDA tests, the CLI and the benchmark, run the GPU tests (kernels against the CPU,
# training on the GPU against the CPU), run pipetrain-bench, train the tiny model 20 steps
# through a 4-stage pipeline on the GPU (and on the CPU for the ratio), append everything with
# the date and the GPU's name to docs/gpu-results.md (generated, never typed), and print the
# table last.
#   usage: scripts/gpu_check.sh [build-dir]        (default: build-gpu)
# The GPU machine is offline and lacks Debian's doctest-dev / nlohmann-json3-dev: first run
# `scripts/gpu_deps.sh` here, then on the device `bash scripts/gpu_check.sh` with
# carry [".gpu-deps"] (CMake falls back to .gpu-deps/include).
#
# Device time is short (15 minutes a session, the machine's start included), so the whole
# script runs against one deadline (PT_GPU_DEADLINE seconds, default 420): every step gets what
# is left, a failed or slow step is reported and the next one still runs, and the table is
# written whatever happened. Where $OUT is set (the device tool), the results file and the logs
# are copied there as they are made, so they come back even if the call is cut short.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
RESULTS=docs/gpu-results.md
DEADLINE=${PT_GPU_DEADLINE:-420}
OUT=${OUT:-}
mkdir -p "$BUILD" docs

die() { echo "gpu_check: $*" >&2; exit 1; }
left() { echo $((DEADLINE - SECONDS)); }
# step NAME MAX CMD...: runs CMD with the smaller of MAX and the time left; logs to $BUILD/NAME.log
step() {
    local name=$1 max=$2; shift 2
    local t; t=$(left); [ "$t" -gt "$max" ] && t=$max
    if [ "$t" -le 5 ]; then echo "gpu_check: no time left for $name" | tee "$BUILD/$name.log"; return 124; fi
    local t0=$SECONDS
    timeout "$t" "$@" >"$BUILD/$name.log" 2>&1
    local rc=$?
    echo "-- $name: exit $rc in $((SECONDS - t0)) s (limit $t s)" >&2
    [ -n "$OUT" ] && cp "$BUILD/$name.log" "$OUT/" 2>/dev/null
    return $rc
}

command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this script needs a CUDA GPU"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
[ -n "$GPU" ] || die "nvidia-smi lists no GPU"
echo "== GPU: $GPU; nvcc $(nvcc --version 2>/dev/null | sed -nE 's/.*release ([0-9.]+).*/\1/p'); $(cmake --version | head -n 1)"

# NCCL and cuBLAS may live only in the Python wheels of the machine's PyTorch: point CMake there.
NV=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
# -k below keeps building the other targets when one fails; make and ninja spell it differently.
if command -v make >/dev/null; then GEN="Unix Makefiles"; KEEP_GOING=(-k); else GEN=Ninja; KEEP_GOING=(-k 0); fi
step configure 120 cmake -S . -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    ${NV:+-DPIPETRAIN_NVIDIA_WHEELS=$NV} || { tail -n 30 "$BUILD/configure.log"; die "cmake configure failed"; }
grep -E '^-- pipetrain:' "$BUILD/configure.log"

echo "== build"
step build 240 cmake --build "$BUILD" -j16 --target test_cuda_kernels test_cuda_train test_device pipetrain \
    pipetrain-bench tutorial_12_gpu_pipeline -- "${KEEP_GOING[@]}" || grep -E "error" -A3 "$BUILD/build.log" | head -n 40
BUILD_LINE="build: $(grep -cE 'error:|Error [0-9]' "$BUILD/build.log") error lines"

echo "== tests"
step tests 150 ctest --test-dir "$BUILD" -R 'cuda|device' --output-on-failure
TESTS=$?
grep -E 'tests passed|Passed|Failed|Skipped|Not Run|\*\*\*' "$BUILD/tests.log" | tail -n 12
if grep -q 'Skipped' "$BUILD/tests.log"; then TEST_LINE="CUDA tests: SKIPPED, no GPU visible to them (ctest exit $TESTS)"; TESTS=1
elif [ $TESTS -eq 0 ]; then TEST_LINE="CUDA tests: passed"
else TEST_LINE="CUDA tests: FAILED (ctest exit $TESTS: $(grep -E '^\s+[0-9]+ - ' "$BUILD/tests.log" | sed -E 's/^ +[0-9]+ - //' | tr '\n' ' '))"; fi

echo "== benchmark"
TABLE=""
if step bench 150 "$BUILD/pipetrain-bench"; then
    TABLE=$(grep '^|' "$BUILD/bench.log" || echo "pipetrain-bench printed no table: $(tail -n 1 "$BUILD/bench.log")")
    # PyTorch's SDPA on the same shapes, when the machine has torch with CUDA (a reference only).
    SDPA=$(timeout 60 python3 scripts/sdpa_bench.py "$BUILD/bench.log" 2>"$BUILD/sdpa.log") || SDPA=""
    [ -n "$SDPA" ] && TABLE="$TABLE
$SDPA"
else
    TABLE="pipetrain-bench failed or ran out of time (log: bench.log): $(tail -n 2 "$BUILD/bench.log" | tr '\n' ' ')"
fi

echo "== training: tiny model, 4-stage 1F1B, 20 steps, GPU then CPU"
# prints "tok/s final-loss" of a run (tok/s of the last step line), or "FAILED"
train() {   # $1 = name, rest = flags
    local name=$1; shift
    step "train-$name" 90 "$BUILD/pipetrain" train --preset tiny --data tests/fixtures/text/sample_zh.txt \
        --out "$BUILD/train-$name" --stages 4 --micro-batches 8 --batch 32 --seq 64 --steps 20 --seed 1 "$@" \
        >/dev/null || { echo "FAILED FAILED"; return; }
    local toks loss
    toks=$(grep '^step ' "$BUILD/train-$name.log" | tail -n 1 | sed -E 's/.*\| ([0-9]+) tok\/s.*/\1/')
    loss=$(sed -nE 's/.*final loss ([0-9.e+-]+).*/\1/p' "$BUILD/train-$name.log")
    echo "${toks:-?} ${loss:-?}"
}
read -r GPU_TOKS GPU_LOSS <<<"$(train gpu --device cuda --trace "$BUILD/timeline-gpu.json")"
read -r BF16_TOKS BF16_LOSS <<<"$(train bf16 --device cuda --dtype bf16)"
read -r CPU_TOKS CPU_LOSS <<<"$(train cpu --threads 1)"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "n/a" }'; }
TABLE="$TABLE

| training run | GPU | CPU | GPU/CPU |
|---|---:|---:|---:|
| train tiny 4-stage 1F1B fp32, GPU vs CPU (tok/s) | $GPU_TOKS | $CPU_TOKS | $(ratio "$GPU_TOKS" "$CPU_TOKS") |
| train tiny 4-stage 1F1B bf16, GPU vs CPU fp32 (tok/s) | $BF16_TOKS | $CPU_TOKS | $(ratio "$BF16_TOKS" "$CPU_TOKS") |
| final loss after 20 steps: GPU fp32 (bf16) vs CPU | $GPU_LOSS ($BF16_LOSS) | $CPU_LOSS | $(ratio "$GPU_LOSS" "$CPU_LOSS") |"

GOALS="performance goals: $(grep -c ' met |' <<<"$TABLE") met, $(grep -c 'MISSED' <<<"$TABLE") missed$(grep 'MISSED' <<<"$TABLE" | cut -d'|' -f2 | sed 's/^ *//; s/ *$//' | tr '\n' ',' | sed 's/^/ (/; s/,$/)/; s/^ ($//')"
[ -f "$RESULTS" ] || printf '# GPU results\n\nGenerated by scripts/gpu_check.sh; each run appends a section. ratio = reference time / kernel time (GEMM: fraction of cuBLAS, memory-bound kernels: fraction of device-to-device copy bandwidth, flash attention: speed-up over v1).\n' >"$RESULTS"
{
    printf '\n## %s — %s (commit %s)\n\n%s; %s; %s; whole check %d s\n\n' "$(date -u '+%Y-%m-%d %H:%M UTC')" "$GPU" \
        "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$TEST_LINE" "$BUILD_LINE" "$GOALS" "$SECONDS"
    echo "$TABLE"
} >>"$RESULTS"
[ -n "$OUT" ] && cp "$RESULTS" "$OUT/"

echo
echo "== $TEST_LINE; $BUILD_LINE; $GOALS; $SECONDS s; appended to $RESULTS"
echo "$TABLE"
exit $TESTS
