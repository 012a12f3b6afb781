#!/usr/bin/env bash
# All benchmarks that this machine can run. Each prints ratios against a reference measured in
# the same run and writes its table under docs/ (generated, never typed):
#   * pipeline: measured makespan vs pp::simulate, speed-up vs one stage (docs/pipeline-bench.md)
#   * CUDA kernels vs cuBLAS / device copies, only where a GPU is present (docs/gpu-results.md,
#     through scripts/gpu_check.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bench_pipeline.sh "$@"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  bash scripts/gpu_check.sh
else
  echo "bench: no GPU here, CUDA kernel benchmarks skipped (scripts/gpu_check.sh runs them on a GPU machine)"
fi
