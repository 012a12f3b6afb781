#!/usr/bin/env bash
# scripts/gpu_check.sh — the one command to run on a GPU machine: configure (Release, sm_90),
# build the CUDA tests, the CLI and the benchmark, run the GPU tests (kernels against the CPU,
# training on the GPU against the CPU), run pipetrain-bench, train the tiny model 20 steps
# through a 4-stage pipeline on the GPU (and on the CPU for the ratio), check interop with the
# real transformers (scripts/hf_interop.py, CPU only, in the background while the tests run),
# time training against PyTorch on the same GPU (scripts/gpu_vs_torch.py), append everything
# with the date and the GPU's name to docs/gpu-results.md (generated, never typed), and print
# the tables last.
#   usage: scripts/gpu_check.sh [build-dir]        (default: build-gpu)
# The GPU machine is offline and lacks Debian's doctest-dev / nlohmann-json3-dev: first run
# `scripts/gpu_deps.sh` here, then on the device `bash scripts/gpu_check.sh` with
# carry [".gpu-deps"] (CMake falls back to .gpu-deps/include). Python: the first of $PT_PYTHON,
# python3, /usr/bin/python3 that imports torch (the device's PyTorch and transformers).
#
# Device time is short (15 minutes a session, the machine's start included), so the whole
# script runs against one deadline (PT_GPU_DEADLINE seconds, default 480): every step gets what
# is left, capped, a failed or slow step is reported and the next one still runs, and the
# tables are written whatever happened. Where $OUT is set (the device tool), the results file
# and a tarball of the logs (gpu-logs.tgz; the tool brings back at most 8 files) are refreshed
# there after every step, so they come back even if the call is cut short.
# The budget of one session (900 s):
#   machine start                      ~120-180 s (outside this script)
#   this script, PT_GPU_DEADLINE        480 s: configure <= 60, build <= 200 (-j16), CUDA tests
#                                       <= 120 (hf_interop.py <= 150 beside them), pipetrain-bench
#                                       <= 90 (+ SDPA <= 60), 3 training runs <= 60 each, 2 MPI runs (~10 s),
#                                       gpu_vs_torch.py what is left, at most PT_TORCH_BUDGET (150)
#   the device call's timeout_s         540 (the deadline + copying back)
#   left for one targeted rerun        ~180 s, e.g. PT_GPU_STEPS=torch PT_GPU_DEADLINE=150
# PT_GPU_STEPS (default "build tests sanitize bench train mpi hf torch schedules") picks the steps;
# "sanitize" runs the CUDA tests under compute-sanitizer (memcheck, and racecheck for the kernels); "schedules"
# dumps PyTorch's own pipelining schedules as CSV (scripts/torch_schedules.py, CPU only, beside the
# build) into $BUILD/torch_schedules, shipped as torch_schedules.tgz for tests/fixtures/; without "build" an
# existing build is used as it is (a rerun on the warm machine, which keeps ignored build dirs).
# PT_TORCH_ARGS adds flags to gpu_vs_torch.py (e.g. "--only eager" or "--shapes small"), PT_HF_ARGS
# to hf_interop.py ("--selftest" tests the plumbing where transformers is missing).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
RESULTS=docs/gpu-results.md
DEADLINE=${PT_GPU_DEADLINE:-480}
STEPS=" ${PT_GPU_STEPS:-build tests sanitize bench train mpi hf torch schedules} "
OUT=${OUT:-}
mkdir -p "$BUILD" docs
want() { [[ "$STEPS" == *" $1 "* ]]; }

die() { echo "gpu_check: $*" >&2; exit 1; }
left() { echo $((DEADLINE - SECONDS)); }
# step NAME MAX CMD...: runs CMD with the smaller of MAX and the time left; logs to $BUILD/NAME.log
# (stdout to $STEP_OUT instead when that is set: a markdown table to keep apart from the log)
step() {
    local name=$1 max=$2; shift 2
    local t; t=$(left); [ "$t" -gt "$max" ] && t=$max
    if [ "$t" -le 5 ]; then echo "gpu_check: no time left for $name" | tee "$BUILD/$name.log"; return 124; fi
    local t0=$SECONDS
    if [ -n "${STEP_OUT:-}" ]; then timeout "$t" "$@" >"$STEP_OUT" 2>"$BUILD/$name.log"
    else timeout "$t" "$@" >"$BUILD/$name.log" 2>&1; fi
    local rc=$?
    echo "-- $name: exit $rc in $((SECONDS - t0)) s (limit $t s)" >&2
    ship
    return $rc
}
# ship: refresh $OUT's copies (the device tool brings back $OUT, at most 8 files)
ship() {
    [ -n "$OUT" ] || return 0
    (cd "$BUILD" && tar czf "$OUT/gpu-logs.tgz.$BASHPID" --ignore-failed-read *.log *.md hf-work/pipetrain.log 2>/dev/null
     mv -f "$OUT/gpu-logs.tgz.$BASHPID" "$OUT/gpu-logs.tgz")
    [ -d "$BUILD/torch_schedules" ] && tar czf "$OUT/torch_schedules.tgz.$BASHPID" -C "$BUILD" torch_schedules 2>/dev/null &&
        mv -f "$OUT/torch_schedules.tgz.$BASHPID" "$OUT/torch_schedules.tgz"
    [ -f "$RESULTS" ] && cp "$RESULTS" "$OUT/"
    return 0
}

command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this script needs a CUDA GPU"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
[ -n "$GPU" ] || die "nvidia-smi lists no GPU"
echo "== GPU: $GPU; nvcc $(nvcc --version 2>/dev/null | sed -nE 's/.*release ([0-9.]+).*/\1/p'); $(cmake --version | head -n 1)"

PY=""
for p in ${PT_PYTHON:-} python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import torch' 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || PY=python3
echo "== python: $PY ($("$PY" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo 'no torch');" \
    "$("$PY" -c 'import transformers; print("transformers", transformers.__version__)' 2>/dev/null || echo 'no transformers'))"

# PyTorch's own schedules as CSV, for the schedule-import tests: CPU only, beside everything else.
SCHED_PID=""
if want schedules; then
    echo "== PyTorch's pipelining schedules as CSV (scripts/torch_schedules.py, in the background)"
    rm -rf "$BUILD/torch_schedules"
    step schedules 120 "$PY" scripts/torch_schedules.py --out "$BUILD/torch_schedules" --timeout 100 &
    SCHED_PID=$!
fi

# NCCL and cuBLAS may live only in the Python wheels of the machine's PyTorch: point CMake there.
NV=$("$PY" -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
# -k below keeps building the other targets when one fails; make and ninja spell it differently.
if command -v make >/dev/null; then GEN="Unix Makefiles"; KEEP_GOING=(-k); else GEN=Ninja; KEEP_GOING=(-k 0); fi
BUILT=(test_cuda_kernels test_cuda_train test_device pipetrain pipetrain-bench tutorial_12_gpu_pipeline)
if want build || [ ! -x "$BUILD/pipetrain" ]; then
    step configure 60 cmake -S . -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
        ${NV:+-DPIPETRAIN_NVIDIA_WHEELS=$NV} || { tail -n 30 "$BUILD/configure.log"; die "cmake configure failed"; }
    grep -E '^-- pipetrain:' "$BUILD/configure.log"
    echo "== build"
    step build 200 cmake --build "$BUILD" -j16 --target "${BUILT[@]}" -- "${KEEP_GOING[@]}" \
        || grep -E "error" -A3 "$BUILD/build.log" | head -n 40
    BUILD_LINE="build: $(grep -cE 'error:|Error [0-9]' "$BUILD/build.log") error lines"
else
    BUILD_LINE="build: the existing $BUILD (PT_GPU_STEPS without build)"
fi

# Interop with transformers needs no GPU: it runs on the CPU beside the CUDA tests, and is
# waited for before anything is timed.
HF_PID=""
: >"$BUILD/hf.md"
: >"$BUILD/torch.md"
if want hf; then
    echo "== interop with transformers (scripts/hf_interop.py, in the background)"
    STEP_OUT="$BUILD/hf.md" step hf 150 "$PY" scripts/hf_interop.py --pipetrain "$BUILD/pipetrain" --work "$BUILD/hf-work" ${PT_HF_ARGS:-} &
    HF_PID=$!
fi

echo "== tests"
TESTS=0; TEST_LINE="CUDA tests: not run (PT_GPU_STEPS)"
if want tests; then
step tests 120 ctest --test-dir "$BUILD" -R 'cuda|device' --output-on-failure
TESTS=$?
grep -E 'tests passed|Passed|Failed|Skipped|Not Run|\*\*\*' "$BUILD/tests.log" | tail -n 12
if grep -q 'Skipped' "$BUILD/tests.log"; then TEST_LINE="CUDA tests: SKIPPED, no GPU visible to them (ctest exit $TESTS)"; TESTS=1
elif [ $TESTS -eq 0 ]; then TEST_LINE="CUDA tests: passed"
else TEST_LINE="CUDA tests: FAILED (ctest exit $TESTS: $(grep -E '^\s+[0-9]+ - ' "$BUILD/tests.log" | sed -E 's/^ +[0-9]+ - //' | tr '\n' ' '))"; fi
fi

echo "== compute-sanitizer"
SAN_LINE="compute-sanitizer: not run (PT_GPU_STEPS);"
if want sanitize; then
    if ! command -v compute-sanitizer >/dev/null; then SAN_LINE="compute-sanitizer: SKIPPED (not on this machine);"
    else
        SAN_LINE="compute-sanitizer:"
        for run in "memcheck test_cuda_kernels" "racecheck test_cuda_kernels" "memcheck test_cuda_train"; do
            set -- $run
            step "sanitize-$1-$2" 90 compute-sanitizer --tool "$1" --print-limit 10 "$BUILD/$2"
            rc=$?
            found=$(grep -hoE '(ERROR|RACECHECK) SUMMARY: .*' "$BUILD/sanitize-$1-$2.log" | head -n 1)
            SAN_LINE="$SAN_LINE $1 $2 exit $rc (${found:-no summary});"
            [ $rc -ne 0 ] && TESTS=1
        done
    fi
fi

echo "== benchmark"
TABLE=""
if ! want bench; then
    TABLE="pipetrain-bench: not run (PT_GPU_STEPS)"
elif step bench 90 "$BUILD/pipetrain-bench"; then
    TABLE=$(grep '^|' "$BUILD/bench.log" || echo "pipetrain-bench printed no table: $(tail -n 1 "$BUILD/bench.log")")
    # PyTorch's SDPA on the same shapes, when the machine has torch with CUDA (a reference only).
    SDPA=$(timeout 60 "$PY" scripts/sdpa_bench.py "$BUILD/bench.log" 2>"$BUILD/sdpa.log") || SDPA=""
    [ -n "$SDPA" ] && TABLE="$TABLE
$SDPA"
else
    TABLE="pipetrain-bench failed or ran out of time (log: bench.log): $(tail -n 2 "$BUILD/bench.log" | tr '\n' ' ')"
fi

# Everything after this point is timed on the CPU too: the interop check must be done.
HF_LINE="HF interop: not run (PT_GPU_STEPS)"; HF_FAIL=0
if [ -n "$HF_PID" ]; then
    wait "$HF_PID"; HF_RC=$?
    case $HF_RC in
        0) HF_LINE="HF interop: $(grep -oE '[0-9]+ of [0-9]+ checks passed' "$BUILD/hf.md" | head -n 1)" ;;
        77) HF_LINE="HF interop: SKIPPED ($(head -n 1 "$BUILD/hf.md"))"; : >"$BUILD/hf.md" ;;
        *) HF_FAIL=1; HF_LINE="HF interop: FAILED (exit $HF_RC; $(grep -oE '[0-9]+ of [0-9]+ checks passed' "$BUILD/hf.md" | head -n 1 || true))" ;;
    esac
    ship
fi

echo "== training: tiny model, 4-stage 1F1B, 20 steps, GPU then CPU"
if want train; then
# prints "tok/s final-loss" of a run (tok/s of the last step line), or "FAILED"
train() {   # $1 = name, rest = flags
    local name=$1; shift
    step "train-$name" 60 "$BUILD/pipetrain" train --preset tiny --data tests/fixtures/text/sample_zh.txt \
        --out "$BUILD/train-$name" --overwrite --stages 4 --micro-batches 8 --batch 32 --seq 64 --steps 20 --seed 1 "$@" \
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
fi

# Two processes, one GPU (issue #15): 2 ranks under mpirun, each a process on the same GPU, with
# MpiComm (messages through host memory) against the same 2 stages as threads: the bits must be
# equal. NCCL itself refuses two ranks on one GPU ("Duplicate GPU detected", since NCCL 2.5; see
# src/nccl_comm.cpp), so --comm nccl needs one GPU per process and is not tried here.
echo "== two processes on one GPU (mpirun -np 2, --comm mpi) against two threads"
MPI_LINE="MPI on the GPU: not run (PT_GPU_STEPS)"
if want mpi; then
    if ! command -v mpirun >/dev/null 2>&1; then
        MPI_LINE="MPI on the GPU: SKIPPED (no mpirun on this machine)"
    elif ! grep -q 'pipetrain: MPI ON' "$BUILD/configure.log" 2>/dev/null; then
        MPI_LINE="MPI on the GPU: SKIPPED (this build has no MPI)"
    else
        flags=(--preset tiny --data tests/fixtures/text/sample_zh.txt --stages 2 --micro-batches 4 --batch 16 --seq 64
               --steps 5 --seed 1 --device cuda --timeout 60)
        step mpi-threads 60 "$BUILD/pipetrain" train "${flags[@]}" --out "$BUILD/mpi-threads" >/dev/null
        step mpi-procs 60 scripts/mpirun.sh 2 "$BUILD/pipetrain" train "${flags[@]}" --comm mpi --out "$BUILD/mpi-procs" >/dev/null
        if cmp -s "$BUILD/mpi-threads/model.safetensors" "$BUILD/mpi-procs/model.safetensors"; then
            MPI_LINE="MPI on the GPU: 2 processes on one GPU bitwise equal to 2 threads"
        else
            MPI_LINE="MPI on the GPU: FAILED (the 2-process model differs from the 2-thread one, or a run failed: mpi-*.log)"
            TESTS=1
        fi
    fi
fi

echo "== training speed against PyTorch (scripts/gpu_vs_torch.py)"
TORCH_LINE="PyTorch comparison: not run (PT_GPU_STEPS)"; TORCH_FAIL=0
if want torch; then
    BUDGET=$(( $(left) - 20 )); [ "$BUDGET" -gt "${PT_TORCH_BUDGET:-150}" ] && BUDGET=${PT_TORCH_BUDGET:-150}
    if [ "$BUDGET" -lt 30 ]; then
        TORCH_LINE="PyTorch comparison: no time left ($(left) s)"
    else
        STEP_OUT="$BUILD/torch.md" step torch $((BUDGET + 15)) "$PY" scripts/gpu_vs_torch.py --pipetrain "$BUILD/pipetrain" \
            --budget "$BUDGET" --out "$BUILD/torch-work" ${PT_TORCH_ARGS:-}
        TORCH_RC=$?
        case $TORCH_RC in
            0) TORCH_LINE="PyTorch comparison: $(grep -c '^| .* | [0-9]\+ | ' "$BUILD/torch.md") runs timed, $(grep -c 'skipped' "$BUILD/torch.md") skipped" ;;
            77) TORCH_LINE="PyTorch comparison: SKIPPED ($(head -n 1 "$BUILD/torch.md"))"; : >"$BUILD/torch.md" ;;
            *) TORCH_FAIL=1; TORCH_LINE="PyTorch comparison: FAILED or cut short (exit $TORCH_RC, log torch.log)" ;;
        esac
        ship
    fi
fi
for md in torch hf; do   # each emptied before its step (below and above), so never an old run's
    [ -s "$BUILD/$md.md" ] && TABLE="$TABLE

$(cat "$BUILD/$md.md")"
done

SCHED_LINE="PyTorch schedules: not run (PT_GPU_STEPS)"
if [ -n "$SCHED_PID" ]; then
    wait "$SCHED_PID"; SCHED_RC=$?
    SCHED_LINE="PyTorch schedules: $(ls "$BUILD"/torch_schedules/*.csv 2>/dev/null | wc -l) CSV files (exit $SCHED_RC; $(tail -n 1 "$BUILD/schedules.log" 2>/dev/null))"
    ship
fi
GOALS="performance goals: $(grep -c ' met |' <<<"$TABLE") met, $(grep -c 'MISSED' <<<"$TABLE") missed$(grep 'MISSED' <<<"$TABLE" | cut -d'|' -f2 | sed 's/^ *//; s/ *$//' | tr '\n' ',' | sed 's/^/ (/; s/,$/)/; s/^ ($//')"
[ -f "$RESULTS" ] || printf '# GPU results\n\nGenerated by scripts/gpu_check.sh; each run appends a section. ratio = reference time / kernel time (GEMM: fraction of cuBLAS, memory-bound kernels: fraction of device-to-device copy bandwidth, flash attention: speed-up over v1).\n' >"$RESULTS"
{
    printf '\n## %s — %s (commit %s)\n\n%s; %s; %s; %s; %s; %s; whole check %d s\n\n' "$(date -u '+%Y-%m-%d %H:%M UTC')" "$GPU" \
        "${PT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}" "$TEST_LINE" "$BUILD_LINE" "$HF_LINE" "$MPI_LINE" "$TORCH_LINE" \
        "$SAN_LINE $SCHED_LINE; $GOALS" "$SECONDS"
    echo "$TABLE"
} >>"$RESULTS"
ship

echo
echo "== $TEST_LINE; $BUILD_LINE; $HF_LINE; $MPI_LINE; $TORCH_LINE; $SAN_LINE $SCHED_LINE; $GOALS; $SECONDS s; appended to $RESULTS"
echo "$TABLE"
[ "$TESTS" -ne 0 ] && exit "$TESTS"
exit $((HF_FAIL | TORCH_FAIL))
