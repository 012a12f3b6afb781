#!/usr/bin/env bash
# Parallel shapes against each other, measured here in one window, the runs alternating (prints,
# asserts nothing; issue #33 §4). Writes runs/parallel-bench.md, or docs/parallel-bench.md with
# --update-docs (generated, never typed). `small` with its 8,000 words on one fixed batch of 16 × 128
# (scripts/bench_cpu_peer.py inputs; a corpus would give it the corpus's vocabulary, a head and a tied
# embedding 25 times smaller), tok/s over the steady steps:
#   * the 2-stage 1F1B, ZB-H1 and ZB-V pipelines (ZB-V: the V shape, 2 chunks a
#     rank), each as threads and as 2 MPI processes, against one rank on 2 threads;
#   * the same 2 processes with Open MPI's shared memory copying twice (single_copy_mechanism
#     none, what scripts/mpirun.sh falls back to where the kernel forbids CMA);
#   * 2 data-parallel replicas, threads and processes, with the sums overlapped (--dp-overlap 1,
#     the default) and after the backward (--dp-overlap 0).
#   scripts/bench_parallel.sh [--quick] [--update-docs]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench_train_lib.sh
source scripts/machine.sh
bench_start parallel-bench "$@"
rounds=$((quick ? 1 : 5))   # five: each round's ratio against its own --threads 2 run, and their median
mpi=0; command -v mpirun >/dev/null && mpi=1


twice=OMPI_MCA_btl_vader_single_copy_mechanism=none
# name | processes (0: threads) | flags | environment
configs=(
  "one rank, --threads 2|0|--threads 2"
  "2-stage 1F1B, M = 8, threads|0|--stages 2 --micro-batches 8 --schedule 1f1b"
  "2-stage 1F1B, M = 8, 2 MPI processes|2|--stages 2 --micro-batches 8 --schedule 1f1b --comm mpi"
  "2-stage 1F1B, M = 8, 2 MPI processes, shared memory copied twice|2|--stages 2 --micro-batches 8 --schedule 1f1b --comm mpi|$twice"
  "2-stage ZB-H1, M = 8, threads|0|--stages 2 --micro-batches 8 --schedule zb-h1"
  "2-stage ZB-H1, M = 8, 2 MPI processes|2|--stages 2 --micro-batches 8 --schedule zb-h1 --comm mpi"
  "2-stage ZB-V (2 chunks a rank), M = 8, threads|0|--stages 2 --micro-batches 8 --schedule zbv"
  "2-stage ZB-V (2 chunks a rank), M = 8, 2 MPI processes|2|--stages 2 --micro-batches 8 --schedule zbv --comm mpi"
  "dp 2, M = 4, threads, overlapped|0|--dp 2 --micro-batches 4 --dp-overlap 1"
  "dp 2, M = 4, threads, after the backward|0|--dp 2 --micro-batches 4 --dp-overlap 0"
  "dp 2, M = 4, 2 MPI processes, overlapped|2|--dp 2 --micro-batches 4 --dp-overlap 1 --comm mpi"
  "dp 2, M = 4, 2 MPI processes, after the backward|2|--dp 2 --micro-batches 4 --dp-overlap 0 --comm mpi"
)
declare -A best each   # each[name,round]: that round's tok/s
for r in $(seq "$rounds"); do
  for c in "${configs[@]}"; do
    IFS='|' read -r name np flags envs <<<"$c"
    launch=(); [ "$np" -gt 0 ] && { [ $mpi = 1 ] || continue; launch=(env $envs scripts/mpirun.sh "$np"); }
    # shellcheck disable=SC2086
    "${launch[@]}" $pt train --preset small --inputs "$inputs" --batch 16 --seq 128 --dropout 0 \
      --steps $((steps + 2)) --out "$tmp/out" --overwrite $flags >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
    v=$(awk -v ms="$(steady_ms "$tmp/log" 2048)" 'BEGIN { printf "%.0f", 2048 / ms * 1e3 }')
    [ "${best[$name]:-0}" -lt "$v" ] && best[$name]=$v
    each[$name,$r]=$v
    echo "round $r: $name: $v tok/s (best ${best[$name]})"
    rm -rf "$tmp/out"
  done
done
b() { echo "${best[$1]:-0}"; }
rows=""
for c in "${configs[@]}"; do
  IFS='|' read -r name _ _ <<<"$c"
  rows+="| $name | $(b "$name") | $(ratio "$(b "$name")" "$(b "one rank, --threads 2")") |"$'\n'
done
# This VM's speed drifts by 10-20% within minutes: besides best against best, each round's ratio
# against the same round's run (they ran a minute apart) and the median of those.
rounds_of() {   # $1 = name, $2 = the name it is compared with: "r1, r2, ... | median"
  local r list="" vals=()
  for r in $(seq "$rounds"); do
    local x; x=$(ratio "${each[$1,$r]:-0}" "${each[$2,$r]:-0}")
    list+="${list:+, }$x"; [ "$x" = - ] || vals+=("$x")
  done
  echo "$list | $(printf '%s\n' "${vals[@]:-}" | median)"
}
# label | the run | the run it is compared with | the goal
goal_list=(
  "the 2-stage 1F1B pipeline (threads) against --threads 2|2-stage 1F1B, M = 8, threads|one rank, --threads 2|≥ 0.95"
  "the 2-stage 1F1B pipeline, 2 MPI processes, against --threads 2|2-stage 1F1B, M = 8, 2 MPI processes|one rank, --threads 2|≥ 0.95"
  "the same, shared memory copied twice|2-stage 1F1B, M = 8, 2 MPI processes, shared memory copied twice|one rank, --threads 2|—"
  "the 2-stage ZB-H1 pipeline (threads) against --threads 2|2-stage ZB-H1, M = 8, threads|one rank, --threads 2|≥ 0.95"
  "the 2-stage ZB-H1 pipeline, 2 MPI processes, against --threads 2|2-stage ZB-H1, M = 8, 2 MPI processes|one rank, --threads 2|≥ 0.95"
  "the 2-stage ZB-V pipeline (threads) against --threads 2|2-stage ZB-V (2 chunks a rank), M = 8, threads|one rank, --threads 2|≥ 0.95"
  "the 2-stage ZB-V pipeline, 2 MPI processes, against --threads 2|2-stage ZB-V (2 chunks a rank), M = 8, 2 MPI processes|one rank, --threads 2|≥ 0.95"
  "dp 2 threads, overlapped against after the backward|dp 2, M = 4, threads, overlapped|dp 2, M = 4, threads, after the backward|> 1"
  "dp 2 processes, overlapped against after the backward|dp 2, M = 4, 2 MPI processes, overlapped|dp 2, M = 4, 2 MPI processes, after the backward|> 1"
)
goals=""
for g in "${goal_list[@]}"; do
  IFS='|' read -r label run base goal <<<"$g"
  goals+="| $label | $(ratio "$(b "$run")" "$(b "$base")") | $(rounds_of "$run" "$base") | $goal |"$'\n'
done
{
  echo "# Parallel shapes (generated by scripts/bench_parallel.sh)"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores: $(machine_cpu), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
  echo "pipetrain train --preset small (its 8,000 words) --inputs F, F one fixed batch of 16 × 128 from"
  echo "scripts/bench_cpu_peer.py inputs, dropout 0, $steps steady steps (the first two not"
  echo "timed); best of $rounds rounds, the runs alternating; the second table also compares each round's"
  echo "runs, a minute apart (this machine's speed drifts between minutes). MPI: scripts/mpirun.sh (Open MPI, shared memory;"
  echo "single copy by CMA: $(scripts/cma_probe.py && echo "allowed here, so used" || echo "forbidden here, so every run copies twice"))."
  [ $mpi = 1 ] || echo "No mpirun here: the MPI rows are missing."
  echo
  echo "| run | tok/s | against one rank on 2 threads |"
  echo "|---|---:|---:|"
  printf '%s' "$rows"
  echo
  echo "| ratio | best against best | each round, against that round's run | median of the rounds | issue #33's goal |"
  echo "|---|---:|---|---:|---|"
  printf '%s' "$goals"
} >"$table"
cat "$table"
echo "table written to $table"
