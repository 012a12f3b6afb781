# scripts/bench_train_lib.sh — sourced by the benchmarks that time `pipetrain train` runs
# (bench_parallel.sh, bench_predict.sh; bench_cpu.sh for steady_ms and ratio alone): their flags, the
# build, the input batch, the steady step.
#   bench_start NAME "$@"   reads --quick / --update-docs: sets quick, rounds, steps, table
#                           (runs/NAME.md, or docs/NAME.md with --update-docs), builds pipetrain
#                           (pt), makes tmp (removed at exit) and $inputs: one fixed batch of
#                           `small`'s own 8,000 words, 16 × 128 (a corpus would give the model
#                           the corpus's vocabulary, a head and a tied embedding 25 times lighter).
#   steady_ms LOG TOKENS    ms a step over the steady steps of a train log (the first two untimed)
#   median_step_ms LOG TOKENS  the median of those steps, each one's ms (a few slow steps move the
#                           mean more than the median)
#   median [FORMAT]         the median of the numbers on stdin, one a line, as FORMAT (%.2f), or "-"
#   ratio A B               A / B to two decimals, or "-" where either is missing (0, empty, >= 1e29)
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

# Step n's line gives the cumulative tok/s from the start, so step n ended at n·tokens / tok_s(n)
# seconds: "n end" a line (tok/s is printed to the unit: ~0.5 ms off a step at 5 s).
step_ends() {   # $1 = log, $2 = tokens a step
  grep '^step ' "$1" | sed -E 's@^step ([0-9]+)/[0-9]+ .* ([0-9.]+) tok/s.*@\1 \2@' | awk -v bt="$2" '{ print $1, $1 * bt / $2 }'
}
steady_ms() {   # $1 = log, $2 = tokens a step
  step_ends "$1" "$2" | awk '$1 == 2 { t2 = $2 } { n = $1; t = $2 } END { printf "%.1f", 1e3 * (t - t2) / (n - 2) }'
}
median_step_ms() {   # $1 = log, $2 = tokens a step: step n alone is its end minus step n-1's
  step_ends "$1" "$2" | awk '$1 > 2 { print 1e3 * ($2 - last) } { last = $2 }' | median %.1f
}
median() {
  sort -g | awk -v f="${1:-%.2f}" 'NF { v[++n] = $1 } END { if (!n) print "-"; else printf f, n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0 && b < 1e29) printf "%.2f", a / b; else printf "-" }'; }
