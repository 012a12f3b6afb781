#!/usr/bin/env bash
# CPU benchmark against PyTorch and OpenBLAS, measured here, in one window, the two sides
# alternating (prints, asserts nothing). Writes runs/cpu-bench.md, or docs/cpu-bench.md with
# --update-docs (generated, never typed):
#   1. GEMM: pipetrain's ops::gemm (pipetrain bench-gemm) against OpenBLAS's sgemm (through
#      torch.mm), GFLOP/s at 1024^3 and at every GEMM shape of the `small` step, 1 and 2 threads;
#   2. the train step: pipetrain train against scripts/bench_cpu_peer.py (plain PyTorch, the same
#      shapes, AdamW), tok/s over the steady steps and peak resident memory;
#   3. where pipetrain's steady step spends its time (PIPETRAIN_PROFILE=1, a long run less a short one);
#   4. how far the two `small` ratios could go: with every op but the GEMM free (1 thread), and with
#      2 threads exactly twice 1 (bounds computed from 2 and 3, not measured).
# The peer needs Debian's python3-torch (and OpenBLAS: libopenblas0-pthread, without which torch
# uses the reference BLAS); both are installed here when apt can, and skipped, saying so, when not.
#   scripts/bench_cpu.sh [--quick] [--update-docs]     --quick: fewer steps and rounds (a smoke run, noisier)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/machine.sh
source scripts/bench_train_lib.sh   # steady_ms and ratio (its bench_start is not used: this script has its own peer set-up)
quick=0
table=runs/cpu-bench.md   # running the bench does not change the tree; --update-docs does
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    --update-docs) table=docs/cpu-bench.md ;;
    *) echo "bench_cpu.sh: unknown argument $arg (expected --quick, --update-docs)" >&2; exit 2 ;;
  esac
done
mkdir -p "$(dirname "$table")"
rounds=$((quick ? 1 : 3)); steps=$((quick ? 4 : 10)); seconds=$([ $quick = 1 ] && echo 0.2 || echo 0.6)

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target pipetrain >/dev/null
pt=build/pipetrain
peer=scripts/bench_cpu_peer.py

have_peer() { /usr/bin/python3 -c "import torch, numpy" 2>/dev/null; }
openblas() { ls /usr/lib/*/openblas-pthread/libblas.so.3 /usr/lib/*/openblas*/libblas.so.3 >/dev/null 2>&1; }
if ! have_peer || ! openblas; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bench_cpu: installing the peer (python3-torch python3-numpy libopenblas0-pthread) with apt"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch python3-numpy libopenblas0-pthread >/dev/null 2>&1 ||
      echo "bench_cpu: apt-get install failed"
  fi
fi
peer_ok=1
have_peer || { peer_ok=0; echo "bench_cpu: no python3-torch here: the PyTorch columns are skipped"; }
blas="OpenBLAS $(dpkg-query -W -f '${Version}' libopenblas0-pthread 2>/dev/null || echo '?')"
openblas || blas="the reference BLAS (no OpenBLAS installed: torch's GEMM is slow, the ratios flatter pipetrain)"
cpu=$(machine_cpu)
coretype=${OPENBLAS_CORETYPE:-}
echo "machine: $(nproc) cores, $cpu; OPENBLAS_CORETYPE=${coretype:-(unset)} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-(unset)}; peer BLAS: $blas"
echo "pipetrain GEMM micro-kernel: $($pt bench-gemm --seconds 0.01 | awk 'NR == 2 { print $1 }')"
# one thread's FMA peak at that kernel's width, the ceiling of every GEMM cell below ("-": plain)
peak=$($pt bench-gemm --shapes 16x16x16:nn --seconds 0.5 --peak | awk '$1 == "peak" { print $3 }')
echo "one thread's FMA peak: $peak GFLOP/s"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
best() { sort -g | tail -n 1; }   # the best of the rounds: noise only ever slows a run down

# ---- 1. GEMM -----------------------------------------------------------------------------------
# The small preset's linear layers with N = batch 16 x seq 128 = 2048 rows (model.cpp): forward
# out = inp W^T (nt), backward-input dinp = dout W (nn), backward-weight dW = dout^T inp (tn).
shapes="1024x1024x1024:nn,2048x256x256:nt,2048x1024x256:nt,2048x256x1024:nt,2048x256x256:nn,2048x256x1024:nn"
shapes+=",2048x1024x256:nn,256x256x2048:tn,1024x256x2048:tn,256x1024x2048:tn"
gemm_rows=""
for threads in 1 2; do
  for r in $(seq "$rounds"); do
    $pt bench-gemm --shapes "$shapes" --threads $threads --seconds "$seconds" | tail -n +2 >>"$tmp/pt.$threads"
    if [ $peer_ok = 1 ]; then
      OPENBLAS_NUM_THREADS=$threads $peer gemm --shapes "$shapes" --threads $threads --seconds "$seconds" >>"$tmp/ob.$threads"
      if [ -n "$coretype${OPENBLAS_L2_SIZE:-}" ]; then   # OpenBLAS's own choice of kernel for this CPU, for comparison
        env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=$threads $peer gemm --shapes "$shapes" --threads $threads \
          --seconds "$seconds" >>"$tmp/own.$threads"
      fi
    fi
  done
  for s in ${shapes//,/ }; do
    dims=${s%%:*}; fl=${s##*:}
    M=${dims%%x*}; rest=${dims#*x}; N=${rest%%x*}; K=${rest#*x}
    ta=$([ "${fl:0:1}" = t ] && echo 1 || echo 0); tb=$([ "${fl:1:1}" = t ] && echo 1 || echo 0)
    p=$(awk -v M=$M -v N=$N -v K=$K -v a=$ta -v b=$tb '$2==M && $3==N && $4==K && $5==a && $6==b { print $7 }' "$tmp/pt.$threads" | best)
    o=-; w=-
    [ $peer_ok = 1 ] && o=$(awk -v M=$M -v N=$N -v K=$K -v a=$ta -v b=$tb '$1==M && $2==N && $3==K && $4==a && $5==b { print $6 }' "$tmp/ob.$threads" | best)
    [ -f "$tmp/own.$threads" ] && w=$(awk -v M=$M -v N=$N -v K=$K -v a=$ta -v b=$tb '$1==M && $2==N && $3==K && $4==a && $5==b { print $6 }' "$tmp/own.$threads" | best)
    row="| $threads | ${M}×${N}×${K} $fl | $p | $o | $(ratio "$p" "$o") |"
    [ -n "$coretype${OPENBLAS_L2_SIZE:-}" ] && row+=" $w | $(ratio "$p" "$w") |"
    gemm_rows+="$row"$'\n'
  done
done
gemm_head="| threads | M×N×K op(A)op(B) | pipetrain GFLOP/s | OpenBLAS GFLOP/s | ratio |"
gemm_rule="|---:|---|---:|---:|---:|"
if [ -n "$coretype${OPENBLAS_L2_SIZE:-}" ]; then
  gemm_head+=" OpenBLAS, own kernel choice | ratio |"
  gemm_rule+="---:|---:|"
fi
printf '%s\n%s\n%s' "$gemm_head" "$gemm_rule" "$gemm_rows"

# ---- 2. the train step -------------------------------------------------------------------------
steady() { awk -v ms="$(steady_ms "$1" "$2")" -v bt="$2" 'BEGIN { printf "%.0f", bt / ms * 1e3 }'; }   # tok/s; $1 = log, $2 = B*T
rss_mib() { awk '/Maximum resident/ { printf "%.0f", $NF / 1024 }' "$1"; }
step_rows=""
declare -A pt_best pt_rss torch_best torch_rss torch_how hf_best best_args round1 round1_best
# The peer at its best: its head on the labelled positions only (as pipetrain's), with this
# environment's OpenBLAS settings and with them unset (OpenBLAS then picks its kernels for this CPU
# itself); the faster of the two is the headline, and the row says which kernels OpenBLAS ran.
# For context only, the peer as Hugging Face computes (every position's logits), small and tiny rows.
# On T > 1 threads the peer also tries its thread splits: OpenBLAS's pthreads and torch's intra-op
# threads each T, or one of them 1 (both T oversubscribes the cores: measured here, small on 2 cores
# ran 2,211 tok/s so and 4,146 with OpenBLAS on 1 thread and torch on 2).
# And with glibc's malloc as it comes and with huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1):
# torch allocates every step's large tensors afresh, and glibc returns them to the kernel, so each
# step faults their pages in again. On the VM of 2026-12-06 (AMD EPYC, x86 family 26) a fault cost
# ~10 µs: a fresh 50 MB tensor 124 ms, the peer's ernie-3.0-nano-zh step 3x slower than with huge
# pages (878 against 2,663 tok/s), small's 1.6x. pipetrain keeps its buffers from step to step
# (its steady steps level with and without), so it runs as it comes.
# Round 1 tries every setting; later rounds only those within 10% of the best of round 1.
peer_run() {   # $1 = set|unset, $2 = default|huge (malloc), $3 = preset, $4 = inputs, $5 = OpenBLAS threads, $6 = torch threads, rest = flags
  local how=$1 malloc=$2 preset=$3 inputs=$4 blas_threads=$5 threads=$6; shift 6
  local unset=(); [ "$how" = unset ] && unset=(-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
  local tunables=${GLIBC_TUNABLES:-}
  [ "$malloc" = huge ] && tunables="${tunables:+$tunables:}glibc.malloc.hugetlb=1"
  env "${unset[@]}" GLIBC_TUNABLES="$tunables" OPENBLAS_NUM_THREADS="$blas_threads" $peer train --preset "$preset" \
    --inputs "$inputs" --threads "$threads" --steps "$steps" "$@"
}
setting_name() {   # $1 = set|unset, $2 = default|huge, $3 = OpenBLAS threads, $4 = torch threads, $5 = the core OpenBLAS reported
  echo "OpenBLAS $5 on $3, torch on $4 thread(s), OPENBLAS_CORETYPE $([ "$1" = unset ] && echo unset || echo "${coretype:-unset}"), malloc $([ "$2" = huge ] && echo "huge pages" || echo "as it comes")"
}
envs="set unset"; [ -z "$coretype" ] && [ -z "${OPENBLAS_L2_SIZE:-}" ] && envs="set"   # nothing to unset
# name | preset | batch | seq | pipetrain flags | torch threads
configs=(
  "small, 1 thread|small|16|128|--threads 1|1"
  "small, 2 threads|small|16|128|--threads 2|2"
  "small, 2-stage 1F1B pipeline, M = 8|small|16|128|--stages 2 --micro-batches 8 --schedule 1f1b|2"
  "tiny, 1 thread|tiny|16|128|--threads 1|1"
  "tiny, 2 threads|tiny|16|128|--threads 2|2"
  "ernie-3.0-nano-zh, 2 threads|ernie-3.0-nano-zh|16|128|--threads 2|2"
  "ernie-3.0-nano-zh, 2-stage 1F1B pipeline, M = 8|ernie-3.0-nano-zh|16|128|--stages 2 --micro-batches 8 --schedule 1f1b|2"
)
for r in $(seq "$rounds"); do
  for c in "${configs[@]}"; do
    IFS='|' read -r name preset B T flags tthreads <<<"$c"
    pk="$preset on $tthreads"   # the peer's runs: rows of one preset and thread count share them (one peer, more samples)
    inputs="$tmp/inputs-$preset.safetensors"
    [ -f "$inputs" ] || $peer inputs --preset "$preset" --batch "$B" --seq "$T" --out "$inputs"
    # shellcheck disable=SC2086
    /usr/bin/time -v $pt train --preset "$preset" --inputs "$inputs" --batch "$B" --seq "$T" --dropout 0 \
      --steps $((steps + 2)) --out "$tmp/out" $flags >"$tmp/log" 2>"$tmp/time" || { cat "$tmp/log" "$tmp/time"; exit 1; }
    v=$(steady "$tmp/log" $((B * T)))
    [ "${pt_best[$name]:-0}" -lt "$v" ] && pt_best[$name]=$v
    pt_rss[$name]=$(rss_mib "$tmp/time")
    rm -rf "$tmp/out"
    if [ $peer_ok = 1 ]; then
      splits="$tthreads:$tthreads"; [ "$tthreads" -gt 1 ] && splits+=" 1:$tthreads $tthreads:1"
      for how in $envs; do
        for malloc in default huge; do
          for split in $splits; do
            key="$pk|$how $malloc ${split%:*} ${split#*:}"
            # after round 1, only the settings within 10% of its best
            [ "$r" -gt 1 ] && [ $((${round1[$key]:-0} * 10)) -lt $((${round1_best[$pk]:-0} * 9)) ] && continue
            out=$(peer_run "$how" "$malloc" "$preset" "$inputs" "${split%:*}" "${split#*:}" --logits labelled)
            v=$(awk '{ print $2 }' <<<"$out")
            if [ "$r" = 1 ]; then round1[$key]=$v; [ "${round1_best[$pk]:-0}" -lt "$v" ] && round1_best[$pk]=$v; fi
            if [ "${torch_best[$pk]:-0}" -lt "$v" ]; then
              torch_best[$pk]=$v torch_rss[$pk]=$(awk '{ print $4 }' <<<"$out") best_args[$pk]="$how $malloc ${split%:*} ${split#*:}"
              torch_how[$pk]=$(setting_name "$how" "$malloc" "${split%:*}" "${split#*:}" "$(awk '{ print $6 }' <<<"$out")")
            fi
          done
        done
      done
      if [ "$preset" != ernie-3.0-nano-zh ]; then   # as Hugging Face computes, in the best setting found so far
        read -r how malloc b t <<<"${best_args[$pk]}"
        v=$(peer_run "$how" "$malloc" "$preset" "$inputs" "$b" "$t" --logits all | awk '{ print $2 }')
        [ "${hf_best[$pk]:-0}" -lt "$v" ] && hf_best[$pk]=$v
      fi
    fi
    echo "round $r: $name: pipetrain ${pt_best[$name]} tok/s, PyTorch at its best ${torch_best[$pk]:--} tok/s (${torch_how[$pk]:-})"
  done
done
for c in "${configs[@]}"; do
  IFS='|' read -r name preset B T flags tthreads <<<"$c"
  pk="$preset on $tthreads"
  p=${pt_best[$name]}; t=${torch_best[$pk]:--}; h=${hf_best[$pk]:--}
  step_rows+="| $name | $p | $t | **$(ratio "$p" "$t")** | ${torch_how[$pk]:--} | $h | $(ratio "$p" "$h") | ${pt_rss[$name]} | ${torch_rss[$pk]:--} |"$'\n'
done
pipe_vs_threads=$(ratio "${pt_best[small, 2-stage 1F1B pipeline, M = 8]}" "${pt_best[small, 2 threads]}")
step_head="| run (batch 16 × seq 128, MLM 15%, dropout 0) | pipetrain tok/s | PyTorch at its best, tok/s | ratio | the peer's best setting | PyTorch, every position's logits (as Hugging Face) | ratio | pipetrain peak RSS MiB | PyTorch peak RSS MiB |"
step_rule="|---|---:|---:|---:|---|---:|---:|---:|---:|"
printf '\n%s\n%s\n%s' "$step_head" "$step_rule" "$step_rows"
echo "small: 2-stage pipeline against pipetrain's own --threads 2: $pipe_vs_threads"

# ---- 3. where the step's time goes ---------------------------------------------------------------
# Each op's time in a steady step: a run of steps + 2 less a run of 2, over the steps between. Both
# end in the same evaluation, and the start-up (first touch of the buffers, whose first writer pays
# the page faults; the weights' first packing) falls in both: a whole run's profile had put
# gelu_forward at 3.3% of the op time, 1.1-1.4% of a steady step's.
prof_run() {   # $1 steps, $2 the log
  PIPETRAIN_PROFILE=1 $pt train --preset small --inputs "$tmp/inputs-small.safetensors" --batch 16 --seq 128 --dropout 0 \
    --steps "$1" --out "$tmp/out" --overwrite --threads 1 >"$2"
}
prof_run $((steps + 2)) "$tmp/prof"
prof_run 2 "$tmp/prof2"
# op, ms a step, calls a step, share, GFLOP a step, GFLOP/s (rows by time), then "total MS"
steady_ops() {
  awk -v n="$steps" 'FNR == 1 { f++ } /^op profile/ { on = 1; next } !on || $1 == "op" || (NF != 4 && NF != 6) || $4 !~ /%$/ { next }
    { s[f, $1] = $2; c[f, $1] = $3; g[f, $1] = (NF == 6 ? $5 : 0); op[$1] = 1 }
    END { for (o in op) { t = (s[1, o] - s[2, o]) / n; if (t <= 0) continue; total += t
            printf "%s %.3f %.1f %.4f\n", o, 1e3 * t, (c[1, o] - c[2, o]) / n, (g[1, o] - g[2, o]) / n }
          printf "total %.3f\n", 1e3 * total }' "$tmp/prof" "$tmp/prof2" | sort -k2 -g -r
}
ops_ms=$(steady_ops)
total_ms=$(awk '$1 == "total" { print $2 }' <<<"$ops_ms")
profile="| op | ms a step | calls a step | share | GFLOP a step | GFLOP/s |"$'\n'"|---|---:|---:|---:|---:|---:|"$'\n'
profile+=$(awk -v T="$total_ms" '$1 != "total" { printf "| %s | %.2f | %.1f | %.1f%% | %s | %s |\n", $1, $2, $3, 100 * $2 / T,
  ($4 > 0 ? sprintf("%.3f", $4) : ""), ($4 > 0 ? sprintf("%.1f", $4 / $2 * 1e3) : "") }' <<<"$ops_ms")
profile+=$'\n'"| all ops | $(printf '%.2f' "$total_ms") | | 100% | | |"
echo "$profile"
# A step's products (the GEMMs' and the attention's flops, as the profile counts them).
step_gflop=$(awk '$1 != "total" { g += $4 } END { printf "%.2f", g }' <<<"$ops_ms")

# ---- 4. how far the two `small` ratios could go, from the numbers above ------------------------------
# 1 thread: the GEMMs' share of the op time (the profile); were every other op free and the GEMMs as
# fast as now, the step would be that share of its time. 2 threads: were pipetrain's 2-thread step
# exactly twice its 1-thread one. Bounds for reading the ratios against, not measurements.
gemm_share=$(awk -v T="$total_ms" '$1 == "gemm" { printf "%.1f", 100 * $2 / T }' <<<"$ops_ms")
p1=${pt_best[small, 1 thread]}; p2=${pt_best[small, 2 threads]}
t1=${torch_best[small on 1]:-}; t2=${torch_best[small on 2]:-}
ceilings="- small, 1 thread: the GEMMs are ${gemm_share:-?}% of a steady step's op time; were every other op free (the GEMMs as fast as now), pipetrain would"
gemm_only=$(awk -v p="$p1" -v s="${gemm_share:-0}" 'BEGIN { if (s > 0) printf "%.0f", p * 100 / s; else printf "-" }')
ceilings+=" run $gemm_only tok/s, $(ratio "$gemm_only" "$t1")× the peer's best."$'\n'
ceilings+="- small, 2 threads: pipetrain's 2 threads run $(ratio "$p2" "$p1")× its 1 thread; were they exactly 2×"
ceilings+=" ($((2 * p1)) tok/s), $(ratio $((2 * p1)) "$t2")× the peer's best."$'\n'
# The FMA peak: a step's products take at least step_gflop / peak seconds on 1 thread (half on 2).
at_peak=$(awk -v p="$peak" -v g="$step_gflop" 'BEGIN { if (p > 0 && g > 0) printf "%.0f", 2048 * p / g; else printf "-" }')
at_peak2=$(awk -v t="$at_peak" 'BEGIN { if (t > 0) printf "%.0f", 2 * t; else printf "-" }')
ceilings+="- small, at the FMA peak: a step's products are $step_gflop GFLOP (the GEMMs' and the attention's, counted"
ceilings+=" by the profile); at one thread's FMA peak ($peak GFLOP/s) with every other op free, pipetrain would run"
ceilings+=" $at_peak tok/s, $(ratio "$at_peak" "$t1")× the peer's best on 1 thread, and at twice it $at_peak2 tok/s,"
ceilings+=" $(ratio "$at_peak2" "$t2")× the peer's best on 2. The peer does the same products (less the scores the flash"
ceilings+=" backward recomputes, a fifth of attention_backward_flash's), so pipetrain's ratios against this peer cannot pass these."
echo "$ceilings"

{
  echo "# CPU benchmark (generated by scripts/bench_cpu.sh)"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores: $cpu, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
  echo "OPENBLAS_CORETYPE=${coretype:-(unset)}, OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-(unset)} (this environment's settings; they pick OpenBLAS's kernels). Peer BLAS: $blas."
  echo "Best of $rounds alternating rounds per cell."
  echo
  echo "## GEMM"
  echo
  echo "pipetrain: ops::gemm with the micro-kernel the CPU dispatch picks ($($pt bench-gemm --seconds 0.01 | awk 'NR == 2 { print $1 }'));"
  echo "every output one fma chain in k, the same bits as gemm_naive. OpenBLAS: sgemm through torch.mm,"
  echo "OPENBLAS_NUM_THREADS = threads. One thread's FMA peak at that kernel's width, the ceiling of every"
  echo "1-thread cell (twice it on 2): $peak GFLOP/s (\`pipetrain bench-gemm --peak\`: independent fma chains, nothing loaded)."
  [ -n "$coretype${OPENBLAS_L2_SIZE:-}" ] && echo "The last two columns run OpenBLAS without OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, so it picks its kernel for this CPU itself."
  echo
  printf '%s\n%s\n%s' "$gemm_head" "$gemm_rule" "$gemm_rows"
  echo
  echo "## Train step"
  echo
  echo "pipetrain train --inputs (a fixed batch) against scripts/bench_cpu_peer.py: a plain PyTorch"
  echo "model of the same shape (post-LN blocks, exact GELU, tied MLM head, AdamW, clip 1.0). The headline"
  echo "ratio (bold) is against the peer at its best: its head on the labelled positions only, as pipetrain's,"
  echo "run with this environment's OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE and with both unset, with glibc's malloc as it"
  echo "comes and with huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1: torch allocates a step's large tensors afresh,"
  echo "and each fresh page is a fault), and on T > 1 threads with OpenBLAS and torch each on T threads or one of them"
  echo "on 1; the fastest kept (round 1 tries every setting, later rounds those within 10% of its best). Rows of one"
  echo "preset and thread count (e.g. small's 2 threads and its 2-stage pipeline) are one peer: their rows give its best over"
  echo "all their runs. pipetrain runs as it comes (it keeps its buffers from step to step). The setting column names the kernels OpenBLAS reported"
  echo "(openblas_get_corename, in the peer's process), the thread split and the malloc."
  echo "The next column is the peer computing every position's logits, as Hugging Face's model does, in that best"
  echo "setting (context, not the headline; skipped for ernie-3.0-nano-zh for time). tok/s over $steps steady steps"
  echo "(the first two are not timed); peak RSS of the whole process."
  echo
  printf '%s\n%s\n%s' "$step_head" "$step_rule" "$step_rows"
  echo
  echo "small, the 2-stage pipeline against pipetrain's own --threads 2 run: **$pipe_vs_threads**."
  echo
  echo "How far these ratios could go, computed from this table (bounds, not measurements):"
  echo
  echo "$ceilings"
  echo
  echo "## Where pipetrain's step spends its time"
  echo
  echo "small, 1 thread, PIPETRAIN_PROFILE=1: a run of $((steps + 2)) steps less a run of 2, over the $steps steps between,"
  echo "so each op's time in a steady step (the start-up, which first touches every buffer, and the final evaluation"
  echo "fall in both runs). The ops only: a step's wall time also holds what runs between them."
  echo
  echo "$profile"
} >"$table"
echo "table written to $table"
