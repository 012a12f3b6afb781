#!/usr/bin/env bash
# The layering of the code, checked (ctest runs it as `layering`): the lesson (pipeline.hpp,
# pipeline_lab.hpp, kernels/, the top level of src/) never includes src/formats/ or src/cli/ (src/ernie.*
# may include three named formats headers), the formats never include src/cli/, and the two headers
# include only <standard headers> (the lab one "pipeline.hpp" too). Prints every include that breaks
# it and exits 1, else one line and 0.
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
lesson=(pipeline.hpp pipeline_lab.hpp src/*.hpp src/*.cpp kernels/*.hpp kernels/cpu/* kernels/cuda/*)
# One exception, by name: src/ernie.* maps what the formats read (parsed safetensors files, the
# Unicode tables) to the model. Copying every tensor into plain vectors first would double a load's
# memory, and the Unicode tables are generated data; so ernie may include these three, nothing else.
ernie_allowed="src/formats/safetensors.hpp|src/formats/unicode.hpp|src/formats/io.hpp"
check "the lesson" "src/formats/|src/cli/" $(printf '%s
' "${lesson[@]}" | grep -vx 'src/ernie\.[ch]pp')
hits=$(grep -nE '^#include "src/(formats|cli)/' src/ernie.hpp src/ernie.cpp | grep -vE "\"($ernie_allowed)\"" || true)
if [ -n "$hits" ]; then
  echo "layering: src/ernie.* may include only ${ernie_allowed//|/, } of src/formats/ and src/cli/:"
  echo "$hits" | sed 's/^/  /'
  bad=1
fi
check "src/formats" "src/cli/" src/formats/*
# The copyable headers: any quoted include (or a non-standard <...>) but the lab's "pipeline.hpp".
for h in pipeline.hpp pipeline_lab.hpp; do
  hits=$(grep -nE '^[[:space:]]*#[[:space:]]*include' "$h" | grep -vE '#include <[a-z_]+>$' |
         { if [ "$h" = pipeline_lab.hpp ]; then grep -vE '#include "pipeline.hpp"$'; else cat; fi; } || true)
  if [ -n "$hits" ]; then
    extra=""; [ "$h" = pipeline_lab.hpp ] && extra=' and "pipeline.hpp"'
    echo "layering: $h must include only standard headers$extra:"
    echo "$hits" | sed 's/^/  /'
    bad=1
  fi
done
[ "$bad" = 0 ] && echo "layering: ok (${#lesson[@]} lesson files include no src/formats/ or src/cli/," \
  "src/ernie.* only ${ernie_allowed//|/, }; src/formats/ includes no src/cli/; pipeline.hpp and" \
  "pipeline_lab.hpp include only the standard library)"
exit "$bad"
