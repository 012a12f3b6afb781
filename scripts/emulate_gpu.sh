#!/usr/bin/env bash
# scripts/emulate_gpu.sh — check pipetrain's CUDA code on a machine without a GPU. Builds the GPU
# tests, the CLI and tutorial 12 with g++ against the emulated GPU of scripts/gpu_emulator/ (its
# README.md says what that checks and what only a real GPU can show), runs them, prints a table.
#   usage: scripts/emulate_gpu.sh [build-dir]              (default build-emu)
#          scripts/emulate_gpu.sh --selftest [build-dir]   planted bugs must be caught
# Exit code 1 when anything fails. The sources are read, never modified.
set -uo pipefail
if [ "${1:-}" = --nccl-vs-thread ]; then  # internal, run by a check in the build folder: LAYOUT...
    shift
    out=nccl-vs-thread-${EMU_GPUS:-1}${EMU_TAG:-}
    train="./pipetrain train --preset tiny --data $(cd "$(dirname "$0")/.." && pwd)/tests/fixtures/text/sample_zh.txt
           --steps 3 --batch 8 --seq 32 --seed 11 --dropout 0.1 --lr 1e-3 --device cuda --overwrite $*"   # a rerun reuses its --out
    $train --out "$out-auto" --trace "$out-auto.json" | tee "$out-auto.log" && $train --comm thread --out "$out-thread" || exit 1
    # One GPU per rank: "auto" must choose NCCL, and NCCL must give ThreadComm's bits.
    grep -q "| comm nccl$" "$out-auto.log" || { echo "emulate_gpu: --comm auto did not choose nccl"; exit 1; }
    # Replicas overlap their sums with the backward unless told not to: NcclComm's side stream.
    overlap=$(case " $* " in *" --dp "*) [[ " $* " == *" --dp-overlap 0 "* ]] && echo 0 || echo 1 ;; *) echo 0 ;; esac)
    sums=$(grep -c '"data-parallel sum, layer' "$out-auto.json")
    [ "$overlap" = 1 ] && [ "$sums" = 0 ] && { echo "emulate_gpu: no data-parallel sum overlapped the backward"; exit 1; }
    [ "$overlap" = 0 ] && [ "$sums" != 0 ] && { echo "emulate_gpu: $sums data-parallel sums overlapped, none expected"; exit 1; }
    echo "data-parallel sums overlapped with the backward: $sums"
    cmp "$out-auto/model.safetensors" "$out-thread/model.safetensors" && echo "nccl = thread, bit for bit"
    exit
fi
if [ "${1:-}" = --mpi-vs-thread ]; then  # internal, run by a check in the build folder: 2 processes, 1 GPU
    repo=$(cd "$(dirname "$0")/.." && pwd)
    train="./pipetrain train --preset tiny --data $repo/tests/fixtures/text/sample_zh.txt --steps 4 --batch 8 --seq 32
           --seed 11 --dropout 0.1 --lr 1e-3 --device cuda --overwrite --stages 2 --micro-batches 4 --eval-every 2 --timeout 120"
    # Rank 0 gathers rank 1's layers for the evaluation and the save: they must land in host memory.
    $train --out mpi-thread && bash "$repo/scripts/mpirun.sh" 2 $train --comm mpi --out mpi-procs || exit 1
    cmp mpi-thread/model.safetensors mpi-procs/model.safetensors && echo "mpi = thread, bit for bit"
    exit
fi
cd "$(dirname "$0")/.."
SELFTEST=0
if [ "${1:-}" = --selftest ]; then SELFTEST=1; shift; fi
mkdir -p "${1:-build-emu}/logs" && B=$(cd "${1:-build-emu}" && pwd)
LOGS=$B/logs
MAKE="make -f scripts/gpu_emulator/Makefile REPO=$PWD B=$B -j2"

build() {  # targets (paths under $B)
    local t0=$SECONDS
    if ! $MAKE "${@/#/$B/}" >"$LOGS/build.log" 2>&1; then
        grep -E -A3 'error|Error' "$LOGS/build.log" | head -n 40
        echo "emulate_gpu: build failed (log: $LOGS/build.log)"
        exit 1
    fi
    echo "== built $* in $((SECONDS - t0)) s"
}

# check NAME EXPECT ENV... COMMAND...: runs in $B in the background, two at a time. EXPECT "" means
# exit code 0 and no skipped GPU case; otherwise a non-zero exit and EXPECT in the output.
NAMES=()
check() {
    local name=$1 expect=$2 log=$LOGS/${1//[^A-Za-z0-9_=.-]/_}
    shift 2
    NAMES+=("$log")
    (
        cd "$B" && t0=$(date +%s%N)
        timeout 1200 env "$@" >"$log.log" 2>&1
        rc=$? secs=$((($(date +%s%N) - t0) / 1000000000))
        if [ -z "$expect" ]; then
            ok=$([ $rc = 0 ] && ! grep -q "skipped: no CUDA device" "$log.log" && echo PASS || echo FAIL)
        else
            ok=$([ $rc != 0 ] && grep -q "$expect" "$log.log" && echo PASS || echo FAIL)
        fi
        printf "%-44s %-5s %5s s   exit %s\n" "$name" "$ok" "$secs" "$rc" >"$log.result"
    ) 2>/dev/null &  # quiet: bash would report each deliberate crash of --selftest
    while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
}

if [ $SELFTEST = 0 ]; then
    build pipetrain tutorial_12_gpu_pipeline test_cuda_kernels test_cuda_train test_device
    # Threads in random order: the kernel test's "same bits on two runs" then compares two schedules.
    check "test_cuda_kernels EMU_ORDER=rand:1" "" EMU_ORDER=rand:1 ./test_cuda_kernels
    check "tutorial_12_gpu_pipeline EMU_EAGER=1 rev" "" EMU_EAGER=1 EMU_ORDER=rev ./tutorial_12_gpu_pipeline
    check "test_cuda_train EMU_GPUS=1" "" EMU_GPUS=1 ./test_cuda_train
    check "test_cuda_train EMU_GPUS=2" "" EMU_GPUS=2 ./test_cuda_train
    check "test_device EMU_GPUS=2" "" EMU_GPUS=2 ./test_device
    # NcclComm (emulated NCCL) against ThreadComm: pipeline send/recv, then data-parallel all-reduces.
    check "train nccl = thread EMU_GPUS=2 stages 2" "" EMU_GPUS=2 bash "$PWD/scripts/emulate_gpu.sh" --nccl-vs-thread --stages 2 --micro-batches 4
    # Replicas: the sums overlapped with the backward (NcclComm's side stream), and after it.
    check "train nccl = thread EMU_GPUS=4 stages 2 dp 2" "" EMU_GPUS=4 bash "$PWD/scripts/emulate_gpu.sh" --nccl-vs-thread --stages 2 --dp 2 --micro-batches 2
    check "train nccl = thread EMU_GPUS=2 dp 2 M 4" "" EMU_GPUS=2 EMU_TAG=-dp bash "$PWD/scripts/emulate_gpu.sh" --nccl-vs-thread --dp 2 --micro-batches 4
    check "train nccl = thread EMU_GPUS=2 dp 2, no overlap" "" EMU_GPUS=2 EMU_TAG=-dp0 bash "$PWD/scripts/emulate_gpu.sh" --nccl-vs-thread --dp 2 --micro-batches 4 --dp-overlap 0
    # The V shape: rank 1's turn is a send to itself inside a group; looped BFS needs late sends.
    check "train nccl = thread EMU_GPUS=2 zbv" "" EMU_GPUS=2 EMU_TAG=-zbv bash "$PWD/scripts/emulate_gpu.sh" --nccl-vs-thread --stages 2 --micro-batches 4 --schedule zbv
    check "train nccl = thread EMU_GPUS=2 looped-bfs" "" EMU_GPUS=2 EMU_TAG=-bfs bash "$PWD/scripts/emulate_gpu.sh" --nccl-vs-thread --stages 2 --micro-batches 8 --schedule looped-bfs --chunks 2
    # Two processes on one GPU (MpiComm, messages staged through host memory) against two threads.
    if command -v mpicxx >/dev/null && command -v mpirun >/dev/null; then
        check "train mpi = thread, 2 processes, 1 GPU" "" EMU_GPUS=1 bash "$PWD/scripts/emulate_gpu.sh" --mpi-vs-thread
    fi
    # A full GPU under one rank: the run stops with that rank named (no hang, no traceback), and
    # leaves no --out behind (an "oom-run left behind" exits 0, which fails the check).
    rm -rf "$B/oom-run"
    check "train, cuda:3 full, EMU_GPUS=4 dp 2" "pipetrain train: rank 3: .*out of memory" EMU_GPUS=4 EMU_OOM_GPU=3 \
        bash -c './pipetrain "$@"; rc=$?; [ -e oom-run ] && { echo "oom-run left behind"; exit 0; }; exit $rc' - \
        train --preset tiny --data "$PWD/tests/fixtures/text/sample_zh.txt" --steps 2 --batch 8 --seq 32 \
        --device cuda --stages 2 --dp 2 --micro-batches 2 --out oom-run
else
    # The bug: gemm v2 without the __syncthreads between loading its tiles and using them.
    mkdir -p "$B/mutant" && python3 - kernels/cuda/gemm.cu "$B/mutant/gemm.cu" <<'EOF'
import sys
s = open(sys.argv[1]).read()
at = s.index('__syncthreads();', s.index('gemm_smem_tiles_kernel('))
open(sys.argv[2], 'w').write(s[:at] + s[at + len('__syncthreads();'):])
EOF
    build selftest mutant/test_cuda_kernels
    for mode in "ok:" "host_deref:HOST CODE touched" "hostptr:is a HOST pointer" "oob:PAST THE END" \
        "diverge:deadlock" "race:RACE" "event:" "eventrace:RACE" "early:NaN" "unwaited:never waited for"; do
        check "selftest ${mode%%:*}" "${mode#*:}" ./selftest "${mode%%:*}"
    done
    check "selftest nccl" "meets a half" EMU_GPUS=2 ./selftest nccl
    check "selftest crossfree" "while the current device is cuda:1" EMU_GPUS=2 ./selftest crossfree
    check "gemm v2 without its first __syncthreads" "FAILURE" ./mutant/test_cuda_kernels -tc="gemm: every*"
fi
wait

echo
printf "%-44s %-5s %7s\n" check result time
failed=0
for log in "${NAMES[@]}"; do
    cat "$log.result" 2>/dev/null || echo "${log##*/}: no result"
    grep -q PASS "$log.result" 2>/dev/null || failed=1
done
[ $failed = 0 ] && echo "all passed (logs: $LOGS)" || echo "FAILED: the logs are in $LOGS"
exit $failed
