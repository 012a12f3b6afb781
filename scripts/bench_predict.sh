#!/usr/bin/env bash
# The step predictor (`pipetrain schedule --predict`) against runs measured here, then predictions
# for shapes past this machine (issue #33 §5). Prints, asserts nothing; writes runs/predict-bench.md,
# or docs/predict-bench.md with --update-docs (generated, never typed):
#   1. links: `pipetrain bench-link` between two threads, and between two MPI processes on the two
#      "machines" of tests/netns_mpirun.sh (two network namespaces: TCP over a veth pair);
#   2. `small` (batch 16 × seq 128) as a 2-stage 1F1B pipeline (M = 8) on 2 threads and as 2 MPI
#      processes, one per namespace, and as 2 replicas (dp 2) across the namespaces with the sums
#      overlapped and not: the steady step time, on one fixed batch of the preset's 8,000 words (the
#      model the predictor times; a corpus would give it the corpus's vocabulary);
#   3. each run predicted right after it ran, from the measured links and the layers timed then
#      (--measured): this VM's speed drifts between windows, so a run and its prediction share one;
#   4. predictions for ERNIE 3.0 base on 64 GPUs, with the assumptions next to the table.
#   scripts/bench_predict.sh [--quick] [--update-docs]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench_train_lib.sh
source scripts/machine.sh
bench_start predict-bench "$@"
rounds=$((quick ? 1 : 5))   # five: each round gives a ratio of its own (section 2)
netns() { PT_NETNS_TIMEOUT=300 tests/netns_mpirun.sh 1 -- "$@"; }
shape=(--preset small --batch 16 --seq 128 --stages 2 --micro-batches 8 --schedule 1f1b)

# ---- 1. the links --------------------------------------------------------------------------------
links_of() { awk '/^--links value/ { print $NF }' "$1"; }
$pt bench-link --comm thread >"$tmp/link-threads"
thread_link=$(links_of "$tmp/link-threads")
two_hosts=1
netns $pt bench-link --comm mpi >"$tmp/link-netns" 2>&1 || two_hosts=0   # 77: no namespaces here (not root, no ip)
net_link=$([ $two_hosts = 1 ] && links_of "$tmp/link-netns" || echo "")
cat "$tmp/link-threads"; [ $two_hosts = 1 ] && cat "$tmp/link-netns" || echo "two namespaces: not here ($(tail -n 1 "$tmp/link-netns"))"

# ---- 2. measured and predicted in the same window ----------------------------------------------
# This VM's speed moves by 10-20% within minutes, so each run is predicted right after it ran: the
# layers timed (--measured) in the window the run was measured in. A prediction takes ~2 s.
# name | launched across the namespaces? | the shape's flags (train and predict alike)
runs=(
  "2-stage 1F1B, 2 threads of one process|0|${shape[*]}"
  "2-stage 1F1B, 2 MPI processes, one per namespace|1|${shape[*]}"
  "2 replicas (dp 2, M = 4), one per namespace, sums overlapped|1|--preset small --batch 16 --seq 128 --stages 1 --dp 2 --micro-batches 4 --dp-overlap 1"
  "2 replicas (dp 2, M = 4), one per namespace, sums after the backward|1|--preset small --batch 16 --seq 128 --stages 1 --dp 2 --micro-batches 4 --dp-overlap 0"
)
declare -A measured median predicted ratios
for _ in $(seq "$rounds"); do
  for r in "${runs[@]}"; do
    IFS='|' read -r name across flags <<<"$r"
    [ "$across" = 1 ] && [ $two_hosts = 0 ] && continue
    launch=(); comm=(); link=$thread_link
    [ "$across" = 1 ] && launch=(netns) comm=(--comm mpi) link=$net_link
    # shellcheck disable=SC2086
    # PIPETRAIN_LEND=0: each rank keeps to its own core, as on its own node (the predictor's premise)
    PIPETRAIN_LEND=0 "${launch[@]}" $pt train $flags "${comm[@]}" --inputs "$inputs" --dropout 0 --steps $((steps + 2)) --out "$tmp/o" \
      --overwrite >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
    v=$(steady_ms "$tmp/log" 2048) m=$(median_step_ms "$tmp/log" 2048)
    rm -rf "$tmp/o"
    # shellcheck disable=SC2086
    $pt schedule --predict $flags --measured --ranks-per-node 1 --links "$link,$link" | tee "$tmp/pred" >&2
    p=$(awk '/^step / { print $2 }' "$tmp/pred")
    ratios[$name]+="${ratios[$name]:+, }$(ratio "$p" "$v")"
    if awk -v a="${measured[$name]:-1e30}" -v b="$v" 'BEGIN { exit !(b < a) }'; then measured[$name]=$v median[$name]=$m predicted[$name]=$p; fi
  done
done

# ---- 3. the table's rows: the best run, its own window's prediction, every round's ratio -----------
check_rows=""
for r in "${runs[@]}"; do
  IFS='|' read -r name across _ <<<"$r"
  link=$([ "$across" = 1 ] && echo "$net_link" || echo "$thread_link")
  if [ "$across" = 1 ] && [ $two_hosts = 0 ]; then check_rows+="| $name | - | not here | - | - | - | - |"$'\n'; continue; fi
  check_rows+="| $name | $link | ${measured[$name]} (${median[$name]}) | ${predicted[$name]} | $(ratio "${predicted[$name]}" "${measured[$name]}") | $(ratio "${predicted[$name]}" "${median[$name]}") | ${ratios[$name]} |"$'\n'
done

# ---- 4. past this machine ----------------------------------------------------------------------------
assume=(--preset ernie-3.0-base-zh --seq 512 --batch 1024 --dtype bf16 --flops 2e14 --links 5,200,10,50)
future=""
while IFS='|' read -r what flags; do
  # shellcheck disable=SC2086
  out=$($pt schedule --predict "${assume[@]}" $flags)
  last=$(tail -n 1 <<<"$out")
  future+="| $what | $(awk '{ print $2 }' <<<"$last") | $(sed -E 's/.*bubble ([0-9.]+%).*/\1/' <<<"$last") | $(sed -E 's/.*up to (.*)$/\1/' <<<"$last") |"$'\n'
done <<'EOF'
P 4 × D 16, 1F1B, M 16, 8 nodes of 8|--stages 4 --dp 16 --micro-batches 16 --ranks-per-node 8
P 4 × D 16, ZB-H1, M 16, 8 nodes of 8|--stages 4 --dp 16 --micro-batches 16 --ranks-per-node 8 --schedule zb-h1
P 4 × D 16, ZB-V, M 16, 8 nodes of 8|--stages 4 --dp 16 --micro-batches 16 --ranks-per-node 8 --schedule zbv
P 4 × D 16, 1F1B, M 16, ZeRO-1|--stages 4 --dp 16 --micro-batches 16 --ranks-per-node 8 --zero 1
P 4 × D 16, 1F1B, M 16, sums after the backward|--stages 4 --dp 16 --micro-batches 16 --ranks-per-node 8 --dp-overlap 0
P 8 × D 8, 1F1B, M 32, 8 nodes of 8|--stages 8 --dp 8 --micro-batches 32 --ranks-per-node 8
P 8 × D 8, 1F1B, M 32, 4 nodes of 16|--stages 8 --dp 8 --micro-batches 32 --ranks-per-node 16
P 8 × D 8, ZB-H1, M 32, 4 nodes of 16|--stages 8 --dp 8 --micro-batches 32 --ranks-per-node 16 --schedule zb-h1
P 1 × D 64, M 4, 8 nodes of 8|--stages 1 --dp 64 --micro-batches 4 --ranks-per-node 8 --schedule gpipe
EOF

{
  echo "# The step predictor (generated by scripts/bench_predict.sh)"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores: $(machine_cpu), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
  echo
  echo "## Measured here, and predicted"
  echo
  echo "\`pipetrain schedule --predict FLAGS --measured --ranks-per-node 1 --links L,L\`: the layers timed"
  echo "here in a step's order and the passes over the parameters at rates timed here, both on the two cores"
  echo "at once (the two ranks share this machine's caches and memory, in two namespaces or not), each rank"
  echo "on its own node for the links, L the link \`pipetrain bench-link\` measured between the two ranks"
  echo "(latency µs, bandwidth GB/s); the layers as the slower core timed them (the ranks wait for each other)."
  echo "Measured: \`pipetrain train FLAGS --inputs F\` (\`small\` with its 8,000 words, F one fixed batch of"
  echo "16 × 128 from \`scripts/bench_cpu_peer.py inputs\`, dropout 0, \`PIPETRAIN_LEND=0\`: no rank runs"
  echo "another's kernels while it waits, as on nodes of their own), $steps steady steps; across the two network"
  echo "namespaces of \`tests/netns_mpirun.sh\` (TCP over a veth pair) where the row says so. $rounds rounds,"
  echo "alternated; each run predicted right after it ran (the layers timed in the same window: this"
  echo "machine's speed drifts by 10-20% between minutes). The row gives the fastest run (by its mean step),"
  echo "the mean of its steady steps and their median (a few slow steps, while one core ran slower, move"
  echo "the mean more than the median; replicas wait for each other every step, so each such step counts), its"
  echo "own round's prediction, and every round's predicted / mean."
  echo
  echo "| the two ranks | link (µs, GB/s) | measured ms a step, mean (median) | predicted ms (its round) | predicted / mean | predicted / median | each round, predicted / mean |"
  echo "|---|---|---:|---:|---:|---:|---|"
  printf '%s' "$check_rows"
  echo
  echo "## Predicted past this machine: ERNIE 3.0 base (12 blocks, hidden 768, vocab 40000), 64 ranks"
  echo
  echo "Assumptions (flags of \`pipetrain schedule --predict\`, \`${assume[*]}\`): batch 1024 sequences of"
  echo "512 tokens; every layer runs at 2e14 FLOP/s (bf16; about a fifth of an H200's dense peak), its BI and"
  echo "BW as long as its forward; within a node 5 µs and 200 GB/s (NVLink-class), across nodes 10 µs and"
  echo "50 GB/s (400 Gb/s InfiniBand); activations stashed in bf16 (half of fp32), weights, gradients and"
  echo "AdamW moments in fp32 (16 bytes a parameter; ZeRO-1 keeps 1/D of the moments); after the sums, the"
  echo "first and last stages swap their copies of the tied word embedding's gradient. Not modelled: the"
  echo "passes over the parameters (the gradient tree, the norm, AdamW: timed only with --measured, as in"
  echo "the table above), the norm's all-reduce, kernel launches, links shared by transfers."
  echo "Memory: the rank that needs most (weights, gradients, moments and its peak stashes)."
  echo
  echo "| shape | step ms | bubble | memory per rank, up to |"
  echo "|---|---:|---:|---:|"
  printf '%s' "$future"
} >"$table"
cat "$table"
echo "table written to $table"
