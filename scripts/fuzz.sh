#!/usr/bin/env bash
# scripts/fuzz.sh — runs the libFuzzer targets of tests/fuzz/ (ASan + UBSan), each seeded from
# tests/fixtures/:
#   scripts/fuzz.sh [--build-dir DIR] [--report FILE] [--budget TOTAL] [seconds] [target...]
# seconds: per target (default 60). target: safetensors, config, ... (default: every
# tests/fuzz/fuzz_*.cpp). The targets are built with clang in DIR (default build-fuzz); each run
# starts from a fresh corpus DIR/corpus/NAME (the seeds copied there; tests/fixtures is only
# read) and leaves what it finds in DIR/findings/NAME/. Per target it prints execs, exec/s,
# corpus size and new findings, then a Markdown table of them all; --report FILE writes that
# table to FILE with a line on what it is and the findings so far (from tests/fuzz/README.md).
# --budget TOTAL: the whole run, build included, takes about TOTAL seconds; a slow build
# shortens each target's run (to 5 s at least). ctest's fuzz_smoke uses it.
# Each target's settings (max_len, seeds, dictionary) are the "// fuzz:" line atop its source.
# Exit: 0 nothing found; 1 a finding (its reproducer is printed: run DIR/fuzz_NAME FILE to see
# it again); 2 bad usage or a failed build; 77 no clang or no libFuzzer runtime (skipped).
# Environment: FUZZ_CXX (default clang++), FUZZ_JOBS (build jobs, default nproc), FUZZ_NICE
# (niceness of the fuzzers, default 10: they run beside the rest of the test suite).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

B=build-fuzz REPORT="" SECONDS_EACH=60 BUDGET=0 TARGETS=() NAMED=""
while [ $# -gt 0 ]; do
    case $1 in
        --build-dir) B=${2:?--build-dir needs a directory}; shift 2 ;;
        --report) REPORT=${2:?--report needs a file}; shift 2 ;;
        --budget) BUDGET=${2:?--budget needs seconds}; shift 2 ;;
        -h|--help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
        [0-9]*) SECONDS_EACH=$1; shift ;;
        -*) echo "fuzz: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) TARGETS+=("${1#fuzz_}") NAMED+=" ${1#fuzz_}"; shift ;;
    esac
done
[[ $SECONDS_EACH =~ ^[0-9]+$ && $SECONDS_EACH -gt 0 ]] || { echo "fuzz: seconds must be a positive integer" >&2; exit 2; }
[[ $BUDGET =~ ^[0-9]+$ ]] || { echo "fuzz: --budget must be a number of seconds" >&2; exit 2; }
if [ ${#TARGETS[@]} = 0 ]; then
    for src in tests/fuzz/fuzz_*.cpp; do n=${src##*/fuzz_}; TARGETS+=("${n%.cpp}"); done
fi
for t in "${TARGETS[@]}"; do
    [ -f "tests/fuzz/fuzz_$t.cpp" ] || { echo "fuzz: no target \"$t\" (tests/fuzz/fuzz_$t.cpp)" >&2; exit 2; }
done

# ---- clang and the libFuzzer runtime, else skip ---------------------------------------------
skip() { echo "fuzz: skipped: $1 (scripts/setup.sh installs clang and libclang-rt-14-dev when it can)"; exit 77; }
CXX=${FUZZ_CXX:-clang++}
command -v "$CXX" >/dev/null || skip "$CXX not found"
RT=$("$CXX" -print-file-name="libclang_rt.fuzzer-$(uname -m).a")
[[ $RT == /* && -f $RT ]] || skip "$CXX has no libFuzzer runtime (libclang_rt.fuzzer-$(uname -m).a)"

# ---- build ----------------------------------------------------------------------------------
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S tests/fuzz -B "$B" -DCMAKE_CXX_COMPILER="$CXX" "${launcher[@]}" >/dev/null || exit 2
cmake --build "$B" -j"${FUZZ_JOBS:-$(nproc)}" --target "${TARGETS[@]/#/fuzz_}" >"$B/build.log" 2>&1 ||
    { tail -n 30 "$B/build.log"; echo "fuzz: build failed ($B/build.log)" >&2; exit 2; }
B=$(cd "$B" && pwd)
if [ "$BUDGET" -gt 0 ]; then   # what the build left of the budget, shared (~2 s each to start and stop)
    per=$(( (BUDGET - SECONDS) / ${#TARGETS[@]} - 2 ))
    per=$(( per < 5 ? 5 : per > SECONDS_EACH ? SECONDS_EACH : per ))
    [ "$per" -lt "$SECONDS_EACH" ] && echo "fuzz: the build took $SECONDS s, so $per s per target (--budget $BUDGET)"
    SECONDS_EACH=$per
fi

# The sanitizers' own settings, whatever the caller's environment holds (scripts/sanitize.sh
# sends reports to files): reports on stderr, where the log below keeps them.
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1

# ---- one target -----------------------------------------------------------------------------
# Fills the globals of a target's run: execs, rate, corpus, found.
run_target() {
    local t=$1 src=tests/fuzz/fuzz_$1.cpp max_len=4096 dict="" seeds=() key=""
    for word in $(sed -n 's|^// fuzz:||p' "$src" | head -n 1); do
        case $word in
            max_len=*) max_len=${word#*=} key="" ;;
            dict=*) dict=tests/fuzz/${word#*=} key="" ;;
            seeds=*) seeds+=("${word#*=}") key=seeds ;;
            *) [ "$key" = seeds ] && seeds+=("$word") ;;
        esac
    done
    local corpus=$B/corpus/$t findings=$B/findings/$t log=$B/logs/$t.log
    rm -rf "$corpus" && mkdir -p "$corpus" "$findings" "$B/logs"
    (cd tests/fixtures && for g in "${seeds[@]}"; do
        for f in $g; do [ -f "$f" ] && cp "$f" "$corpus/${f//\//_}"; done
    done)
    [ -d "tests/fuzz/seeds/$t" ] && cp tests/fuzz/seeds/"$t"/* "$corpus/"
    local n_seeds; n_seeds=$(ls "$corpus" | wc -l)
    local before; before=$(ls "$findings" | sort)
    # libFuzzer stops itself after max_total_time; the outer timeout is for a wedged process.
    (cd "$findings" && timeout -k 10 $((SECONDS_EACH + 120)) nice -n "${FUZZ_NICE:-10}" "$B/fuzz_$t" \
        -max_total_time="$SECONDS_EACH" -max_len="$max_len" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$findings/" ${dict:+-dict="$ROOT/$dict"} "$corpus" >"$log" 2>&1)
    local rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    corpus_files=$(grep -o 'corp: [0-9]*/[0-9]*[bKM]*b' "$log" | tail -n 1 | sed 's/corp: //')
    found=$(comm -13 <(echo "$before") <(ls "$findings" | sort) | sed '/^$/d')
    [ -z "$corpus_files" ] && corpus_files="$(ls "$corpus" | wc -l)"
    printf 'fuzz: %-12s %4s s  %10s execs  %7s exec/s  corpus %s (from %s seeds)  findings %s\n' \
        "$t" "$SECONDS_EACH" "${execs:-?}" "${rate:-?}" "$corpus_files" "$n_seeds" "$(echo -n "$found" | grep -c .)"
    if [ -n "$found" ] || [ $rc != 0 ]; then
        grep -m 4 -E '^fuzz: |ERROR: |SUMMARY: |runtime error: |what\(\): ' "$log" | sed 's/^/    /'
        for f in $found; do echo "    reproducer: $findings/$f   (run: $B/fuzz_$t $findings/$f)"; done
        [ -z "$found" ] && echo "    libFuzzer exited with $rc and left no reproducer: see $log"
        echo "    log: $log"
        return 1
    fi
}

# ---- every target, then the table -----------------------------------------------------------
table="| target | seconds | execs | exec/s | corpus (inputs/bytes) | findings |
|---|---:|---:|---:|---:|---:|"
status=0
for t in "${TARGETS[@]}"; do
    run_target "$t" || status=1
    table+="
| $t | $SECONDS_EACH | ${execs:-?} | ${rate:-?} | $corpus_files | $(echo -n "$found" | grep -c .) |"
done
table+="

Generated by \`scripts/fuzz.sh $SECONDS_EACH$NAMED\` on $(date -u +%Y-%m-%d), $(nproc) cores, $("$CXX" --version | head -n 1)."
echo
echo "$table"
if [ -n "$REPORT" ]; then   # the table with what it means around it (scripts/reliability.sh includes it)
    {
        echo "The libFuzzer targets of \`tests/fuzz/\` under ASan + UBSan, each seeded from \`tests/fixtures/\` and run"
        echo "for $SECONDS_EACH s, one after the other; what each checks and how to replay a finding: \`tests/fuzz/README.md\`."
        echo
        echo "$table"
        echo
        echo "### Findings so far"
        awk '/^## / { on = ($0 == "## Findings"); next } on' tests/fuzz/README.md
    } >"$REPORT"
    echo "fuzz: report written to $REPORT"
fi
[ $status = 0 ] && echo "fuzz: no finding" || echo "fuzz: FINDINGS above (reproducers in $B/findings/)"
exit $status
