#!/usr/bin/env bash
# The layering of the code, checked (ctest runs it as `layering`): the lesson (pipeline.hpp,
# kernels/, the top level of src/) never includes src/formats/ or src/cli/, and the formats never
# include src/cli/. Prints every include that breaks it and exits 1, else one line and 0.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
check() {   # $1 = what the files are, $2 = the forbidden include pattern, rest = files
  local what=$1 pattern=$2; shift 2
  local hits
  hits=$(grep -nE "^#include \"($pattern)" "$@" 2>/dev/null || true)
  if [ -n "$hits" ]; then
    echo "layering: $what must not include ${pattern//|/ or }:"
    echo "$hits" | sed 's/^/  /'
    bad=1
  fi
}
shopt -s nullglob
lesson=(pipeline.hpp src/*.hpp src/*.cpp kernels/*.hpp kernels/cpu/* kernels/cuda/*)
check "the lesson" "src/formats/|src/cli/" "${lesson[@]}"
check "src/formats" "src/cli/" src/formats/*
[ "$bad" = 0 ] && echo "layering: ok (${#lesson[@]} lesson files include no src/formats/ or src/cli/; src/formats/ includes no src/cli/)"
exit "$bad"
