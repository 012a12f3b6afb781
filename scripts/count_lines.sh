#!/usr/bin/env bash
# The code by track, with each track's reading budget, counted, never typed (README "Reading the
# code"):
#   scripts/count_lines.sh             prints the track table
#   scripts/count_lines.sh --readme    writes it into README.md between its two marker lines
#   scripts/count_lines.sh --check     exits 77 when README.md's table is stale (ctest reading_map,
#                                      shown as skipped: a count that moved is not a broken program)
#   scripts/count_lines.sh --budgets   exits 1 when a track is over its budget, a product function is
#                                      over 60 lines, or a source file belongs to no track (ctest
#                                      line_budgets)
# Every C++/CUDA file of pipeline*.hpp, kernels/ and src/ belongs to exactly one track: a new file
# must be put in one below, so the table never leaves code out.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob

core=(pipeline.hpp)
lesson_files=(kernels/ops.hpp kernels/ops.inc kernels/bf16.hpp kernels/philox.hpp kernels/cpu/gemm_chain.hpp
  kernels/cpu/{gemm,layernorm,activations,attention,crossentropy,embedding,dropout,adamw}.cpp
  src/{config,model,batch,stage,comm,step,train_step,ernie}.{hpp,cpp} src/tags.hpp src/pairwise.hpp)
lab=(pipeline_lab.hpp)
speed=(kernels/cpu/gemm_blocked.cpp kernels/cpu/gemm_reuse.hpp kernels/cpu/threads.cpp kernels/cpu/parallel.hpp kernels/cpu/vecmath.hpp)
reliability=(src/mpi_comm.{hpp,cpp} src/watchdog.{hpp,cpp} src/cli/interrupt.{hpp,cpp} src/async_sum.hpp src/comm_async.cpp
  src/dp_overlap.{hpp,cpp})
gpu=(src/device.{hpp,cpp} src/nccl_comm.{hpp,cpp} kernels/cuda/* kernels/bench.cu)
product=()
for f in src/formats/* src/cli/*; do
  case " ${reliability[*]} " in *" $f "*) ;; *) product+=("$f") ;; esac
done
existing() { for f in "$@"; do [ -e "$f" ] && echo "$f"; done; }
mapfile -t lesson_files < <(existing "${lesson_files[@]}")
mapfile -t reliability < <(existing "${reliability[@]}")
mapfile -t gpu < <(existing "${gpu[@]}")
mapfile -t lab < <(existing "${lab[@]}")
lesson=("${core[@]}" "${lesson_files[@]}")

# The budgets: "about" N lines, so a track fails only past N + 5%.
core_budget=550
lesson_budget=4000
max_function=60   # the product track's functions
over() { echo $(( $1 * 105 / 100 )); }

n() { [ $# -gt 0 ] || { echo 0; return; }; cat "$@" | wc -l | tr -d ' '; }
row() {   # $1 = track, $2 = what it holds, $3 = budget, rest = the files
  local name=$1 what=$2 budget=$3; shift 3
  printf '| %s | %s | %s | %s |\n' "$name" "$what" "$(n "$@")" "$budget"
}
table() {
  echo "| track | files | lines | budget |"
  echo "|---|---|---:|---|"
  row "core header" '`pipeline.hpp`: actions and schedules, GPipe, 1F1B, interleaved, the plain send plan, validate, Stage/Comm, the Pipeline executor' \
    "~$core_budget" "${core[@]}"
  row "lesson" 'the core + `kernels/ops.*` + the CPU spec kernels (`kernels/cpu/`) + `src/{config,model,batch,stage,comm,step,train_step,ernie,pairwise}`' \
    "~$lesson_budget" "${lesson[@]}"
  row "schedules lab" '`pipeline_lab.hpp`: the zero-bubble family, ZB-V, V-Half, V-Min, DualPipeV, looped BFS, late-send plans, simulate, auto, timeline, partition' \
    "none; each schedule one function" "${lab[@]}"
  row "CPU speed" '`kernels/cpu/gemm_blocked.cpp` (the micro-kernels), `gemm_reuse.hpp` (weights packed once a step), `vecmath.hpp`, `threads.cpp` + `parallel.hpp` (the pool)' \
    "none" "${speed[@]}"
  row "processes and reliability" '`src/mpi_comm.*`, `src/watchdog.*`, `src/cli/interrupt.*`, the overlapped sums (`src/async_sum.hpp`, `src/comm_async.cpp`, `src/dp_overlap.*`)' "none" "${reliability[@]}"
  row "GPU" '`src/device.*`, `src/nccl_comm.*`, `kernels/cuda/`, `kernels/bench.cu`' "none" "${gpu[@]}"
  row "product" '`src/formats/`, `src/cli/`' "none; functions ≤ $max_function lines" "${product[@]}"
}

budgets() {
  local bad=0 all f
  all=" ${core[*]} ${lesson_files[*]} ${lab[*]} ${speed[*]} ${reliability[*]} ${gpu[*]} ${product[*]} "
  for f in pipeline*.hpp kernels/*.* kernels/cpu/* kernels/cuda/* src/*.* src/formats/* src/cli/*; do
    case "$all" in *" $f "*) ;; *) echo "count_lines: $f is in no track: add it to one in scripts/count_lines.sh" >&2; bad=1 ;; esac
  done
  local c l
  c=$(n "${core[@]}") l=$(n "${lesson[@]}")
  [ "$c" -le "$(over $core_budget)" ] || { echo "count_lines: the core header is $c lines, over its budget of ~$core_budget (fails above $(over $core_budget))" >&2; bad=1; }
  [ "$l" -le "$(over $lesson_budget)" ] || { echo "count_lines: the lesson is $l lines, over its budget of ~$lesson_budget (fails above $(over $lesson_budget))" >&2; bad=1; }
  /usr/bin/python3 scripts/function_lengths.py --selftest >/dev/null || bad=1
  local cpp=() long
  for f in "${product[@]}"; do case "$f" in *.cpp|*.hpp) cpp+=("$f") ;; esac; done
  if ! long=$(/usr/bin/python3 scripts/function_lengths.py --over "$max_function" "${cpp[@]}"); then
    echo "count_lines: product functions over $max_function lines (lines, where, name):" >&2
    echo "$long" >&2
    bad=1
  fi
  [ "$bad" = 0 ] && echo "count_lines: core header $c lines (~$core_budget), lesson $l lines (~$lesson_budget), every product function ≤ $max_function lines, every file in a track"
  return "$bad"
}

case "${1:-}" in
  "") table ;;
  --budgets) budgets ;;
  --readme|--check)
    begin='<!-- reading map: generated by scripts/count_lines.sh --readme -->'
    end='<!-- end of the reading map -->'
    grep -qF "$begin" README.md || { echo "count_lines: README.md has no line '$begin'" >&2; exit 1; }
    new=$(awk -v b="$begin" -v e="$end" -v map="$(table)" '$0 == b { print; print map; skip = 1; next } $0 == e { skip = 0 } !skip' README.md)
    if [ "$1" = --check ]; then
      [ "$new" = "$(cat README.md)" ] && echo "count_lines: README.md's track table is up to date" ||
        { echo "count_lines: README.md's track table is stale (only the table; nothing is broken):" \
            "run scripts/count_lines.sh --readme" >&2
          diff <(cat README.md) <(printf '%s\n' "$new") | grep '^[<>]' >&2 || true
          exit 77; }
    else
      printf '%s\n' "$new" > README.md.tmp && mv README.md.tmp README.md && echo "count_lines: README.md updated"
    fi ;;
  *) echo "usage: scripts/count_lines.sh [--readme | --check | --budgets]" >&2; exit 2 ;;
esac
