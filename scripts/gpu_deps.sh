#!/usr/bin/env bash
# Copies the two header-only dependencies (doctest, nlohmann/json) from this machine's Debian
# packages into .gpu-deps/include, for a machine where they cannot be installed (the offline
# GPU machine: pass `carry: [".gpu-deps"]` to the device call). CMake falls back to that folder.
# Nothing else needs preparing: scripts/hf_interop.py and scripts/gpu_vs_torch.py use the GPU
# machine's own numpy, torch and transformers, the fixtures the working tree carries and the
# pipetrain that gpu_check.sh builds there; they download nothing. What is checked here is that
# the scripts the device runs at least parse, before device time is spent on them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
rm -rf .gpu-deps
mkdir -p .gpu-deps/include
cp -r /usr/include/doctest /usr/include/nlohmann .gpu-deps/include/
bash -n scripts/gpu_check.sh
for f in scripts/hf_interop.py scripts/gpu_vs_torch.py scripts/sdpa_bench.py scripts/convert_checkpoint.py; do
    python3 -c 'import ast, sys; ast.parse(open(sys.argv[1], encoding="utf-8").read(), sys.argv[1])' "$f"
done
echo "gpu_deps: $(du -sh .gpu-deps | cut -f1) in .gpu-deps/include (doctest, nlohmann); device scripts parse"
echo "gpu_deps: on the device: bash scripts/gpu_check.sh   (carry [\".gpu-deps\"], timeout_s 540)"
