#!/usr/bin/env bash
# Copies the two header-only dependencies (doctest, nlohmann/json) from this machine's Debian
# packages into .gpu-deps/include, for a machine where they cannot be installed (the offline
# GPU machine: pass `carry: [".gpu-deps"]` to the device call). CMake falls back to that folder.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
rm -rf .gpu-deps
mkdir -p .gpu-deps/include
cp -r /usr/include/doctest /usr/include/nlohmann .gpu-deps/include/
echo "gpu_deps: $(du -sh .gpu-deps | cut -f1) in .gpu-deps/include (doctest, nlohmann)"
