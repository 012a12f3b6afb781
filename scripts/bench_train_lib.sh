# scripts/bench_train_lib.sh — sourced by the benchmarks that time `pipetrain train` runs
# (bench_parallel.sh, bench_predict.sh): their flags, the build, the input batch, the steady step.
#   bench_start NAME "$@"   reads --quick / --update-docs: sets quick, rounds, steps, table
#                           (runs/NAME.md, or docs/NAME.md with --update-docs), builds pipetrain
#                           (pt), makes tmp (removed at exit) and $inputs: one fixed batch of
#                           `small`'s own 8,000 words, 16 × 128 (a corpus would give the model
#                           the corpus's vocabulary, a head and a tied embedding 25 times lighter).
#   steady_ms LOG TOKENS    ms a step over the steady steps of a train log (the first two untimed)
#   median_step_ms LOG TOKENS  the median of those steps, each one's ms (a step slowed by a passing
#                           neighbour on the VM moves the mean, not the median)
bench_start() {
  local name=$1 arg; shift
  quick=0 table=runs/$name.md
  for arg in "$@"; do
    case $arg in
      --quick) quick=1 ;;
      --update-docs) table=docs/$name.md ;;
      *) echo "$(basename "$0"): unknown argument $arg (expected --quick, --update-docs)" >&2; exit 2 ;;
    esac
  done
  mkdir -p "$(dirname "$table")"
  rounds=$((quick ? 1 : 3)) steps=$((quick ? 4 : 10))
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$(nproc)" --target pipetrain >/dev/null
  pt=$PWD/build/pipetrain
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  inputs=$tmp/inputs-small.safetensors
  scripts/bench_cpu_peer.py inputs --preset small --batch 16 --seq 128 --out "$inputs"
}

# Step n's line gives the cumulative tok/s from the start, so step n ended at n·tokens / tok_s(n).
steady_ms() {   # $1 = log, $2 = tokens a step
  grep '^step ' "$1" | sed -E 's@^step ([0-9]+)/[0-9]+ .* ([0-9.]+) tok/s.*@\1 \2@' |
    awk -v bt="$2" '$1 == 2 { t2 = 2 * bt / $2 } { n = $1; t = n * bt / $2 } END { printf "%.1f", 1e3 * (t - t2) / (n - 2) }'
}

# Step n alone: its end minus step n-1's (tok/s is printed to the unit: ~0.5 ms a step at 5 s).
median_step_ms() {   # $1 = log, $2 = tokens a step
  grep '^step ' "$1" | sed -E 's@^step ([0-9]+)/[0-9]+ .* ([0-9.]+) tok/s.*@\1 \2@' |
    awk -v bt="$2" '{ t = $1 * bt / $2 } $1 > 2 { print 1e3 * (t - last) } { last = t }' | sort -g |
    awk '{ v[NR] = $1 } END { printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
