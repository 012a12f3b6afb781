#!/usr/bin/env bash
# Installs what pipetrain needs on Debian/Ubuntu when it is missing (root + apt), or prints
# the exact apt-get line and fails. Sourced by test.sh and run.sh; also runnable alone.
set -euo pipefail
# libopenmpi-dev + openmpi-bin: ranks as processes (src/mpi_comm.cpp, scripts/mpirun.sh, test_mpi_comm).
need=(cmake g++ make doctest-dev nlohmann-json3-dev fortunes-zh python3 python3-numpy libopenmpi-dev openmpi-bin)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing packages. Run:  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
# Optional: clang and its libFuzzer runtime, for scripts/fuzz.sh (the ctest entry fuzz_smoke).
# Installed when apt can; without them fuzzing is skipped, never an error. PIPETRAIN_NO_OPTIONAL=1
# skips the attempt (tests/doc_commands.py runs scripts/run.sh three times; one try is enough).
[ "${PIPETRAIN_NO_OPTIONAL:-0}" = 1 ] && exit 0
optional=(clang libclang-rt-14-dev python3-onnx chromium)   # python3-onnx, chromium: the ONNX and browser checks (tests)
missing=()
for p in "${optional[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null &&
     (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq &&
      apt-get install -y -qq --no-install-recommends "${missing[@]}") >/dev/null 2>&1; then
    echo "setup: installed ${missing[*]} (optional, for scripts/fuzz.sh and the ONNX checks)"
  else
    echo "setup: optional ${missing[*]} not installed here; without them scripts/fuzz.sh, the ONNX checker case and the browser case skip" \
         "(sudo apt-get install -y ${missing[*]})"
  fi
fi
# Optional, for tests only: the independent consumers of what pipetrain writes (transformers.js and
# onnxruntime-node; tests/test_js_consumers.cpp), pinned by tests/js/package-lock.json.
# --ignore-scripts: onnxruntime-node's install script downloads GPU binaries from outside (and
# fails); its CPU binary is in the package. Without npm the tests skip, saying so.
js=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/js
if [ ! -f "$js/node_modules/.package-lock.json" ] || [ "$js/package-lock.json" -nt "$js/node_modules/.package-lock.json" ]; then
  if command -v npm >/dev/null && (cd "$js" && timeout 600 npm ci --ignore-scripts --no-audit --no-fund >/dev/null 2>&1); then
    echo "setup: installed tests/js/node_modules (npm ci --ignore-scripts; transformers.js, onnxruntime-node)"
  else
    echo "setup: tests/js/node_modules not installed (needs npm and the npm registry); test_js_consumers skips"
  fi
fi
