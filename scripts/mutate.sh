#!/usr/bin/env bash
# Mutation testing: does the quick suite catch plausible one-line bugs?
# Each mutation of scripts/mutations.txt is applied, one at a time, to a scratch copy of the tree;
# the scratch build (configured once, without CUDA) is rebuilt incrementally and the tests run:
# first the mutation's expected killers, then, if they all pass, the rest of the quick suite
# (every ctest entry but emulated_gpu and fuzz_smoke). The first failing test kills the mutation.
# Not part of CI (too slow); run it before closing an issue that touches the lesson.
#
# Usage: scripts/mutate.sh [--only NAME[,NAME]] [--list] [--update-docs] [--docs-only]
#                          [--build-dir DIR] [--scratch DIR] [--timeout S] [--no-baseline]
#   --list         the mutations, their files and expected killers; nothing is built
#   --check        exits 1 naming each stale mutation (its sed changes nothing); nothing is built (ctest mutations_fresh)
#   --update-docs  write docs/mutation.md from this run (date, machine, commit, one row each, score)
#   --docs-only    write docs/mutation.md from the last run's results, without running anything
#   --build-dir    the scratch build (default SCRATCH/build); --scratch the scratch root
#                  (default build-mutate/, ignored by git: tree/ is the copy, results.tsv the rows)
#   --timeout      seconds per test (default 300: a mutation that hangs a test is killed by it)
#   --no-baseline  skip the check that the unmutated tree passes the quick suite
#   --resume       keep results.tsv and run only the mutations it does not hold yet (no baseline)
set -euo pipefail
export LC_ALL=C   # bytes: a test message cut mid-character must not lose a row of the table
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/machine.sh"
LIST="$ROOT/scripts/mutations.txt"
SCRATCH="$ROOT/build-mutate"
BUILD=""
ONLY=""
TIMEOUT=300
MODE=run
UPDATE_DOCS=0
BASELINE=1
RESUME=0
QUICK_EXCLUDE="emulated_gpu|fuzz_smoke"
FLAKY=""   # tests seen failing unmutated, then passing (set by the baseline)

while [ $# -gt 0 ]; do
    case "$1" in
        --only) ONLY="$2"; shift 2 ;;
        --list) MODE=list; shift ;;
        --check) MODE=check; shift ;;
        --update-docs) UPDATE_DOCS=1; shift ;;
        --docs-only) MODE=docs; shift ;;
        --build-dir) BUILD="$2"; shift 2 ;;
        --scratch) SCRATCH="$2"; shift 2 ;;
        --timeout) TIMEOUT="$2"; shift 2 ;;
        --no-baseline) BASELINE=0; shift ;;
        --resume) RESUME=1; BASELINE=0; shift ;;
        -h|--help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
        *) echo "mutate.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ "$MODE" != list ] && [ "$MODE" != check ]; then mkdir -p "$SCRATCH"; SCRATCH="$(cd "$SCRATCH" && pwd)"; fi
TREE="$SCRATCH/tree"
BUILD="${BUILD:-$SCRATCH/build}"
RESULTS="$SCRATCH/results.tsv"   # name, result, killer, seconds, first message (tab-separated)
LOGS="$SCRATCH/logs"
trim() { sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' <<<"$1"; }

# ---- the list: NAME | FILE | SED | KILLERS, comments and blank lines skipped -----------------
NAMES=(); FILES=(); SEDS=(); KILLERS=()
while IFS= read -r line; do
    [[ "$line" =~ ^[[:space:]]*(#|$) ]] && continue
    rest="$line"
    name="$(trim "${rest%% | *}")"; rest="${rest#* | }"
    file="$(trim "${rest%% | *}")"; rest="${rest#* | }"
    killers="$(trim "${rest##* | }")"; sedexpr="$(trim "${rest% | *}")"
    if [ -z "$name" ] || [ -z "$file" ] || [ -z "$sedexpr" ] || [ "$sedexpr" = "$rest" ]; then
        echo "mutate.sh: $LIST: cannot read the line: $line" >&2; exit 2
    fi
    if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then continue; fi
    NAMES+=("$name"); FILES+=("$file"); SEDS+=("$sedexpr"); KILLERS+=("$killers")
done <"$LIST"
if [ -n "$ONLY" ]; then
    for n in ${ONLY//,/ }; do
        printf '%s\n' "${NAMES[@]}" | grep -qx -- "$n" || { echo "mutate.sh: no mutation named $n" >&2; exit 2; }
    done
fi

if [ "$MODE" = list ] || [ "$MODE" = check ]; then
    # Each sed is tried on a temporary copy of its file: "stale" if it changes nothing.
    tmp="$(mktemp)"; trap 'rm -f "$tmp"' EXIT
    stale=0
    for i in "${!NAMES[@]}"; do
        state=stale
        if [ -f "$ROOT/${FILES[$i]}" ]; then
            cp "$ROOT/${FILES[$i]}" "$tmp"
            if sed -i -e "${SEDS[$i]}" "$tmp" 2>/dev/null && ! cmp -s "$tmp" "$ROOT/${FILES[$i]}"; then
                state="$({ diff "$ROOT/${FILES[$i]}" "$tmp" || true; } | grep -c "^>") line(s)"
            fi
        fi
        [ "$state" = stale ] && stale=$((stale + 1))
        [ "$MODE" = check ] && [ "$state" != stale ] && continue
        printf '%-36s %-30s %-9s %s\n' "${NAMES[$i]}" "${FILES[$i]}" "$state" "${KILLERS[$i]}"
    done
    echo "${#NAMES[@]} mutations, $stale stale"
    [ "$MODE" = list ] || [ "$stale" = 0 ] || { echo "mutate.sh: a stale mutation's sed no longer changes its file: fix its line in scripts/mutations.txt (the code it mutates moved or changed)" >&2; exit 1; }
    exit 0
fi

# What went wrong, in one line: doctest's test case, its first failed check and the values, or
# the first error, exception or timeout line.
first_message() {
    awk -v tree="$TREE/" '
        function clean(x) { gsub(tree, "", x); gsub(/\t/, " ", x); sub(/^[ \t]+/, "", x); return x }
        /^TEST CASE:/ { tc = clean(substr($0, 11)) }
        found && /^  values:|^  logged:/ { msg = msg " (" clean($0) ")"; if (/values/) exit; next }
        found { exit }
        !found && /ERROR|error:|what\(\)|terminate|\(Timeout\)|Assertion|deadlock/ && !/The following tests/ {
            found = 1; msg = (tc != "" && /ERROR/ ? tc ": " : "") clean($0)
        }
        END { print substr(msg, 1, 200) }' "$1"
}

# ---- docs/mutation.md from results.tsv -------------------------------------------------------
write_docs() {
    local out="$ROOT/docs/mutation.md" killed=0 survived=0 other=0 total_s=0
    [ -s "$RESULTS" ] || { echo "mutate.sh: no results in $RESULTS: run the mutations first" >&2; exit 1; }
    while IFS=$'\t' read -r _ result _ secs _; do
        case "$result" in killed) killed=$((killed + 1)) ;; survived) survived=$((survived + 1)) ;; *) other=$((other + 1)) ;; esac
        total_s=$((total_s + secs))
    done <"$RESULTS"
    local scored=$((killed + survived))
    {
        echo "# Mutation testing"
        echo
        echo "Generated by \`scripts/mutate.sh --update-docs\`; do not edit by hand. Each row is one plausible"
        echo "single-line bug from \`scripts/mutations.txt\`, applied alone to a scratch copy, rebuilt and run"
        echo "against the quick suite (every ctest entry but emulated_gpu and fuzz_smoke): its expected killers"
        echo "first, then the rest. \"killed by\" is the first failing test; \"stale\" means the line the"
        echo "mutation names has changed (fix the mutation), \"no build\" that the mutant does not compile."
        echo
        cat "$SCRATCH/run_info.txt" 2>/dev/null || true
        echo "- mutations run: $((scored + other)) of the ${#NAMES[@]} in the list, $total_s s in all"
        echo
        echo "**Score: $killed of $scored killed ($(( scored ? 100 * killed / scored : 0 ))%)**"
        echo
        echo "| mutation | result | killed by | seconds | first message |"
        echo "|---|---|---|---:|---|"
        while IFS=$'\t' read -r name result killer secs msg; do
            [ "$result" = killed ] && [ -f "$LOGS/$name.log" ] && msg="$(first_message "$LOGS/$name.log")"
            msg="$(printf '%s' "$msg" | iconv -f UTF-8 -t UTF-8 -c 2>/dev/null || true)"   # a message cut at 200 bytes may end mid-character
            echo "| \`$name\` | $result | $killer | $secs | ${msg//|/\\|} |"
        done <"$RESULTS"
        if [ "$survived" -gt 0 ]; then
            echo
            echo "Survivors (a test should fail on each; the expected killers are in scripts/mutations.txt):"
            echo
            while IFS=$'\t' read -r name result _ _ _; do
                [ "$result" = survived ] || continue
                grep -E "^$name \| " "$LIST" | sed -e 's/^/    /'
            done <"$RESULTS"
        fi
    } >"$out"
    echo "wrote $out (score $killed/$scored)"
}
if [ "$MODE" = docs ]; then write_docs; exit 0; fi

# ---- the scratch copy: tracked and unignored files, copied only where they differ -----------------
# A copied file gets a fresh mtime, so the build redoes what depends on it even after a mutant.
sync_tree() {
    local f
    (cd "$ROOT" && git ls-files -co --exclude-standard -z) | while IFS= read -r -d '' f; do
        [ -f "$ROOT/$f" ] || continue
        if ! cmp -s "$ROOT/$f" "$TREE/$f"; then mkdir -p "$(dirname "$TREE/$f")" && cp "$ROOT/$f" "$TREE/$f"; fi
    done
    # The npm consumers (ignored, installed by scripts/setup.sh): without them test_js_consumers
    # skips, and a broken ONNX writer survived (onnx_varint_128_one_byte, 2026-12-06).
    if [ -d "$ROOT/tests/js/node_modules" ]; then ln -sfn "$ROOT/tests/js/node_modules" "$TREE/tests/js/node_modules"; fi
}
echo "scratch copy: $TREE, build: $BUILD"
mkdir -p "$TREE" "$LOGS"
# The commit the tree is copied from (the work tree may move on while the mutations run).
COMMIT="$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- . ':!docs/mutation.md' || echo ' (with uncommitted changes)')"
sync_tree
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
    cmake -S "$TREE" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DPIPETRAIN_CUDA=OFF >"$LOGS/configure.log"
fi
JOBS="$(nproc)"
# The scratch tree has no build/ of its own: lab.sh pair (a documented command) finds the tools here.
export PIPETRAIN_BUILD="$BUILD"

# Runs ctest with extra arguments; prints "TEST (Reason)" for the first failure, nothing if none.
run_ctest() {
    local log="$1"; shift
    (cd "$BUILD" && ctest --output-on-failure --stop-on-failure --timeout "$TIMEOUT" "$@") >>"$log" 2>&1 || true
    # (|| true: head closing the pipe early is not a failure of the script)
    { sed -n '/The following tests FAILED:/,$p' "$log" | grep -oE '[0-9]+ - [^ ]+ \([^)]*\)' | head -1 | sed 's/^[0-9]* - //'; } || true
}

if [ "$BASELINE" = 1 ]; then
    echo "baseline: building and running the quick suite on the unmutated tree"
    cmake --build "$BUILD" -j"$JOBS" >"$LOGS/baseline.log" 2>&1 || { echo "baseline build failed: $LOGS/baseline.log" >&2; exit 1; }
    # A test that fails and then passes unmutated is flaky: its kills are only counted when it
    # fails twice on the mutant (see confirm below).
    while :; do
        bad="$(run_ctest "$LOGS/baseline.log" -j"$JOBS" -E "^($QUICK_EXCLUDE${FLAKY:+|$FLAKY})\$")"
        [ -n "$bad" ] || break
        bad="${bad%% *}"
        : >"$LOGS/baseline-rerun.log"
        if [ -n "$(run_ctest "$LOGS/baseline-rerun.log" -R "^$bad\$")" ]; then
            echo "baseline: $bad fails twice without any mutation; fix that first ($LOGS/baseline.log)" >&2; exit 1
        fi
        echo "baseline: $bad failed once and then passed: flaky (its kills must fail twice)"
        FLAKY="${FLAKY:+$FLAKY|}$bad"
        : >"$LOGS/baseline.log"
    done
fi
# --no-baseline keeps the flaky tests the last baseline found.
if [ "$BASELINE" = 1 ]; then echo "$FLAKY" >"$SCRATCH/flaky.txt"; else FLAKY="$(cat "$SCRATCH/flaky.txt" 2>/dev/null || true)"; fi
# A kill by a flaky test counts if the test fails again on the mutant; else the rest of the suite runs.
confirm() {
    local killer="$1" log="$2"
    if [ -n "$killer" ] && [ -n "$FLAKY" ] && [[ "|$FLAKY|" == *"|${killer%% *}|"* ]]; then
        echo "== confirming the flaky ${killer%% *}" >>"$log"
        [ -n "$(run_ctest "$log.confirm" -R "^${killer%% *}\$")" ] || killer=""
        cat "$log.confirm" >>"$log"; rm -f "$log.confirm"
    fi
    echo "$killer"
}

if [ "$RESUME" = 1 ] && [ -s "$SCRATCH/run_info.txt" ] && [ -s "$RESULTS" ]; then
    # The rows already there keep their commit; this run's are said apart.
    echo "- resumed $(date -u '+%Y-%m-%d %H:%M UTC') at commit $COMMIT: the rows after the first $(wc -l <"$RESULTS")" >>"$SCRATCH/run_info.txt"
else
    {
        echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
        [ -z "$FLAKY" ] || echo "- flaky without mutation (a kill by one counts only if it fails twice): ${FLAKY//|/, }"
        echo "- machine: $(uname -sm), $(nproc) cores ($(machine_cpu))"
        echo "- commit: $COMMIT"
    } >"$SCRATCH/run_info.txt"
fi
[ "$RESUME" = 1 ] || : >"$RESULTS"
printf '%-36s %-10s %-34s %6s\n' mutation result "killed by" seconds
START_ALL=$SECONDS
for i in "${!NAMES[@]}"; do
    name="${NAMES[$i]}" file="${FILES[$i]}" killers="${KILLERS[$i]}"
    if [ "$RESUME" = 1 ] && cut -f1 "$RESULTS" | grep -qx -- "$name"; then continue; fi
    log="$LOGS/$name.log"; : >"$log"
    t0=$SECONDS result="" killer="-" msg=""
    target="$TREE/$file" backup="$SCRATCH/backup"
    if [ ! -f "$target" ]; then
        result=stale msg="$file does not exist"
    else
        cp -p "$target" "$backup"
        if ! sed -i -e "${SEDS[$i]}" "$target" 2>>"$log"; then
            result=stale msg="sed failed"
        elif cmp -s "$target" "$backup"; then
            result=stale msg="the sed changes nothing in $file"
        fi
        diff -u "$backup" "$target" | tail -n +3 | grep -E '^[-+]' >>"$log" || true
    fi
    if [ -z "$result" ]; then
        targets=(); for k in ${killers//,/ }; do targets+=("$k"); done
        regex="^($(IFS='|'; echo "${targets[*]}"))\$"
        if ! cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}" >>"$log" 2>&1; then
            # A killer that is not a build target (a script entry): build everything instead.
            if grep -q "unknown target" "$log" && cmake --build "$BUILD" -j"$JOBS" >>"$log" 2>&1; then :; else result="no build"; fi
        fi
        if [ -z "$result" ]; then
            killer="$(confirm "$(run_ctest "$log" -R "$regex")" "$log")"
            if [ -z "$killer" ]; then   # the expected killers missed it: the rest of the quick suite
                if cmake --build "$BUILD" -j"$JOBS" >>"$log" 2>&1; then
                    killer="$(confirm "$(run_ctest "$log" -j"$JOBS" -E "^($QUICK_EXCLUDE|${regex:2:-2})\$")" "$log")"
                else
                    result="no build"
                fi
            fi
            [ -n "$result" ] || { [ -n "$killer" ] && result=killed || result=survived; }
            [ "$result" = killed ] && msg="$(first_message "$log")"
            [ -n "$killer" ] || killer="-"
        fi
        [ "$result" = "no build" ] && msg="$({ grep -m1 'error:' "$log" | sed "s#$TREE/##g" | cut -c1-140; } || true)"
    fi
    [ -f "$backup" ] && { cp "$backup" "$target"; rm -f "$backup"; }   # fresh mtime: rebuilt next time
    secs=$((SECONDS - t0))
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$result" "$killer" "$secs" "$msg" >>"$RESULTS"
    printf '%-36s %-10s %-34s %6s\n' "$name" "$result" "$killer" "$secs"
done
killed="$(grep -c $'\tkilled\t' "$RESULTS" || true)" survived="$(grep -c $'\tsurvived\t' "$RESULTS" || true)"
scored=$((killed + survived))
echo "score: $killed of $scored killed ($(( scored ? 100 * killed / scored : 0 ))%), $((SECONDS - START_ALL)) s"
grep -v -E $'\t(killed|survived)\t' "$RESULTS" | cut -f1,2,5 | sed 's/^/  not scored: /' || true
[ "$UPDATE_DOCS" = 1 ] && write_docs
exit 0
