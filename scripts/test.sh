#!/usr/bin/env bash
# The test command: install what is missing, configure, build (CUDA objects too when nvcc
# exists), run every test. Usage: scripts/test.sh [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
cd build
ctest --output-on-failure --timeout 600 -j"$(nproc)" "$@"
