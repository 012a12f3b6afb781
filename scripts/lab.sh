#!/usr/bin/env bash
# scripts/lab.sh — the graded labs (labs/NN_topic/, docs/teaching.md).
#
# For students:
#   scripts/lab.sh list                      the labs, one line each
#   scripts/lab.sh check NN [--verbose]      build the check with your file (only it recompiles), run it
#   scripts/lab.sh submit [--name NAME] [--labs 03,04]
#                                            check every lab, pack your files + results.json into
#                                            submission-NAME.tar.gz
# For teachers:
#   scripts/lab.sh grade DIR [--labs 03,04] [--out OUT]
#                                            re-run every DIR/*.tar.gz in a fresh copy of the labs:
#                                            OUT/grades.csv (student × task) and OUT/summary.md
#   scripts/lab.sh class-copy DIR            this checkout without labs/solutions/, for the class
#   scripts/lab.sh pair HOST_A HOST_B [--net SUBNET]
#                                            do two machines see each other under mpirun? (hostname,
#                                            then 4 ranks exchange messages and all-reduce, bitwise)
#   scripts/lab.sh expected --build-dir B [--check]
#                                            docs/labs-expected.md: each lab's passing output, and what
#                                            each planted mistake gets (--check: is the file current?)
# For the build and CI (ctest labkit_NN):
#   scripts/lab.sh kit NN --build-dir B      the starter says "not implemented", the answer passes,
#                                            every planted mistake gets its hint
#   scripts/lab.sh plant NN MISTAKE OUTDIR   the answer with one mistake of mistakes.txt planted
#
# PIPETRAIN_BUILD: the build directory check and submit use (default: build/ in the checkout).
set -euo pipefail
root=$(cd -P "$(dirname "$0")/.." && pwd -P)

die() { echo "lab.sh: $*" >&2; exit 2; }
# value FLAG "$@": the flag's value, or one line saying it has none (set -u would say "$2: unbound").
value() { [ $# -ge 3 ] && [ -n "$3" ] || die "$2: needs a value"; }
# Whether this tree is a git checkout of its own (its repository's top). A release unpacked inside
# another repository (a course's) is not, though git answers there for that repository: its list
# of this folder (empty where untracked), its commit.
is_checkout() { [ "$(git -C "$root" rev-parse --show-toplevel 2>/dev/null)" = "$root" ]; }
commit() { { is_checkout && git -C "$root" rev-parse --short HEAD; } || echo unknown; }

# labs/NN_topic for NN (01, 1 and 4 work too).
lab_dir() {
  local nn
  [[ $1 =~ ^[0-9]{1,2}$ ]] || die "lab '$1': expected a lab number such as 04 (scripts/lab.sh list)"
  nn=$(printf '%02d' "$((10#$1))")
  local d=("$root"/labs/"$nn"_*/)
  [ -d "${d[0]}" ] || die "lab $nn: no such lab (scripts/lab.sh list)"
  echo "${d[0]%/}"
}
lab_nn() { basename "$1" | cut -c1-2; }
all_labs() { for d in "$root"/labs/[0-9][0-9]_*/; do echo "${d%/}"; done; }
# The labs named by --labs 03,04 (all when empty).
chosen_labs() {
  if [ -z "$1" ]; then all_labs; return; fi
  local n
  for n in ${1//,/ }; do lab_dir "$n"; done
}
# The student's files of a lab: its .cpp files but check.cpp, then answers.md.
student_files() {
  local f
  for f in "$1"/*.cpp; do [ "$(basename "$f")" = check.cpp ] || basename "$f"; done
  [ -f "$1/answers.md" ] && echo answers.md
  return 0
}

# ---- building one lab's check -----------------------------------------------------------------
# build_lab SOURCE BUILD NN LOG: configures BUILD from the checkout SOURCE if needed, builds lab_NN;
# on failure prints the compiler's errors (at most 15 lines) and returns 1.
build_lab() {
  local source=$1 build=$2 nn=$3 log=$4
  if [ ! -f "$build/CMakeCache.txt" ]; then
    echo "configuring $build (once)"
    cmake -S "$source" -B "$build" -DCMAKE_BUILD_TYPE=Release ${LAB_CMAKE_ARGS:-} >"$log" 2>&1 || { tail -20 "$log"; return 1; }
  fi
  [ -f "$build/libpipetrain_core.a" ] || echo "building pipetrain's library first (once; a few minutes on 2 cores)"
  if ! cmake --build "$build" --target "lab_$nn" -j"$(nproc)" >"$log" 2>&1; then
    echo "lab $nn: your file does not compile; the compiler says:"
    grep -E "error|Error" "$log" | grep -v -E "^(make|gmake)(\[[0-9]+\])?:" | sed "s|$source/||g" | head -15
    echo "(the whole log: $log)"
    return 1
  fi
}

cmd_list() {
  local d
  for d in $(all_labs); do
    printf '%s  %-22s %s\n' "$(lab_nn "$d")" "$(basename "$d" | cut -c4-)" \
      "$(sed -n 's/^# Lab [0-9]*: *//p' "$d/README.md" 2>/dev/null | head -1)"
  done
}

cmd_check() {
  [ $# -ge 1 ] || die "usage: scripts/lab.sh check NN [--verbose]"
  local dir nn build log t0 t1
  dir=$(lab_dir "$1"); shift
  nn=$(lab_nn "$dir")
  build=${PIPETRAIN_BUILD:-$root/build}
  log=$build/lab_$nn.build.log
  mkdir -p "$build"
  t0=$EPOCHREALTIME
  build_lab "$root" "$build" "$nn" "$log" || exit 1
  awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "build: %.1f s\n", b - a }'
  exec "$build/lab_$nn" "$@"
}

# ---- submit ------------------------------------------------------------------------------------
cmd_submit() {
  local name=${USER:-student} labs="" out=""
  while [ $# -gt 0 ]; do
    case $1 in
      --name) value submit "$@"; name=$2; shift 2 ;;
      --labs) value submit "$@"; labs=$2; shift 2 ;;
      --out) value submit "$@"; out=$2; shift 2 ;;
      *) die "submit: unknown argument '$1' (--name NAME, --labs 03,04, --out FILE)" ;;
    esac
  done
  [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || die "--name '$name': letters, digits, '.', '_' and '-' only"
  out=${out:-$PWD/submission-$name.tar.gz}
  local build=${PIPETRAIN_BUILD:-$root/build} stage dir nn f results="" chosen
  # Before anything: a lab that does not exist ends the submission (in the loop's $( ) its error only
  # dropped that lab, and an empty submission was written, exit 0).
  chosen=$(chosen_labs "$labs")
  stage=$(mktemp -d)
  trap "rm -rf '$stage'" EXIT
  mkdir -p "$stage/files" "$build"
  for dir in $chosen; do
    nn=$(lab_nn "$dir")
    mkdir -p "$stage/files/labs/$(basename "$dir")"
    for f in $(student_files "$dir"); do cp "$dir/$f" "$stage/files/labs/$(basename "$dir")/$f"; done
    build_lab "$root" "$build" "$nn" "$stage/build.log" >/dev/null && "$build/lab_$nn" --json "$stage/$nn.json" >/dev/null 2>&1 || true
    if [ -f "$stage/$nn.json" ]; then
      results+="${results:+,}$(sed 's/^/  /' "$stage/$nn.json")"
      echo "lab $nn: $(grep -c '"pass"' "$stage/$nn.json") of $(grep -c '"status"' "$stage/$nn.json") tasks pass"
    else
      results+="${results:+,}  {\"lab\": \"$nn\", \"build\": \"failed\"}"
      echo "lab $nn: does not compile (scripts/lab.sh check $nn shows why)"
    fi
  done
  {
    echo "{"
    echo "  \"student\": \"$name\","
    echo "  \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
    echo "  \"pipetrain\": \"$(commit)\","
    echo "  \"machine\": {\"os\": \"$(uname -srm)\", \"cores\": $(nproc), \"compiler\": \"$(c++ --version 2>/dev/null | head -1 | tr -d '"\\')\"},"
    echo "  \"labs\": ["
    echo "$results"
    echo "  ]"
    echo "}"
  } >"$stage/files/results.json"
  tar -czf "$out.tmp" -C "$stage/files" . && mv "$out.tmp" "$out"
  echo "wrote $out (your files and results.json; the grader re-runs every check itself)"
}

# ---- grade -------------------------------------------------------------------------------------
# One submission's files into the grading tree: the starters first, then each expected file of the
# tarball that is a regular file. Anything else in the tarball is ignored; a path leaving it is refused.
unpack_submission() {
  local tarball=$1 tree=$2 pristine=$3 labs=$4 into dir f
  rm -rf "$tree/labs" && cp -r "$pristine" "$tree/labs"
  into=$(mktemp -d)
  if tar -tzf "$tarball" 2>/dev/null | grep -q -E '(^/|(^|/)\.\.(/|$))'; then
    rm -rf "$into"; echo "refused: a path in the tarball leaves it"; return 1
  fi
  if ! tar -xzf "$tarball" -C "$into" --no-same-owner --no-same-permissions 2>/dev/null; then
    rm -rf "$into"; echo "refused: not a readable .tar.gz"; return 1
  fi
  for dir in $labs; do
    for f in $(student_files "$dir"); do
      local got=$into/labs/$(basename "$dir")/$f
      if [ -f "$got" ] && [ ! -L "$got" ]; then cp "$got" "$tree/labs/$(basename "$dir")/$f"; fi
    done
  done
  rm -rf "$into"
}

cmd_grade() {
  [ $# -ge 1 ] || die "usage: scripts/lab.sh grade DIR [--labs 03,04] [--out OUT]"
  local subs=$1 labs="" out=""
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --labs) value grade "$@"; labs=$2; shift 2 ;;
      --out) value grade "$@"; out=$2; shift 2 ;;
      *) die "grade: unknown argument '$1' (--labs 03,04, --out OUT)" ;;
    esac
  done
  local chosen
  chosen=$(chosen_labs "$labs")   # a lab that does not exist: said before anything is made
  [ -d "$subs" ] || die "grade: $subs: not a directory of submissions"
  subs=$(cd "$subs" && pwd)
  local tarballs=("$subs"/*.tar.gz)
  [ -f "${tarballs[0]}" ] || die "grade: $subs holds no .tar.gz"
  out=${out:-$subs/grades}
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  local work=$out/work tree build pristine dir nn
  tree=$work/tree; build=$work/build; pristine=$work/starters
  # A fresh copy of this tree without the answers (copy_without_answers, below).
  rm -rf "$tree" "$pristine" && mkdir -p "$tree"
  copy_without_answers "$tree" || die "grade: copying $root to $tree failed"
  cp -r "$tree/labs" "$pristine"
  echo "grading ${#tarballs[@]} submissions in $work (the library is built once)"
  export LAB_CMAKE_ARGS="-DPIPETRAIN_CUDA=OFF"   # the labs need no GPU; nvcc would only cost time
  # The task list of each lab: the starter's own --json (every task "todo").
  local header="student" row status
  for dir in $chosen; do
    nn=$(lab_nn "$dir")
    build_lab "$tree" "$build" "$nn" "$work/build.log" >/dev/null || die "grade: lab $nn's starter does not build ($work/build.log)"
    "$build/lab_$nn" --json "$work/starter_$nn.json" >/dev/null 2>&1 || true
    for t in $(sed -n 's/.*"task": \([0-9]*\).*/\1/p' "$work/starter_$nn.json"); do header+=",$nn.$t"; done
  done
  echo "$header,passed,tasks" >"$out/grades.csv"
  {
    echo "# Grades"
    echo
    echo "$(date -u +%Y-%m-%d), pipetrain $(commit); labs:" \
         "$(for d in $chosen; do printf '%s ' "$(lab_nn "$d")"; done)"
    echo "Every check was re-run here on the submitted files; no results.json was read."
    echo
    echo "| student | passed | notes |"
    echo "| --- | --- | --- |"
  } >"$out/summary.md"
  local tarball student passed total notes
  for tarball in "${tarballs[@]}"; do
    student=$(basename "$tarball" .tar.gz); student=${student#submission-}
    student=$(printf '%s' "$student" | tr -c 'A-Za-z0-9._-' '_')
    row=$student passed=0 total=0 notes=""
    local refused=""
    refused=$(unpack_submission "$tarball" "$tree" "$pristine" "$chosen") || true
    for dir in $chosen; do
      nn=$(lab_nn "$dir")
      local n; n=$(grep -c '"task"' "$work/starter_$nn.json")
      rm -f "$work/result.json"
      if [ -n "$refused" ]; then
        status=refused
      elif ! build_lab "$tree" "$build" "$nn" "$work/$student.$nn.log" >/dev/null; then
        status=build-error
        notes+="lab $nn does not compile: $(grep -m1 -E 'error' "$work/$student.$nn.log" | sed "s|$tree/||g" | cut -c1-120 | tr '|' '/'); "
      else
        timeout 300 "$build/lab_$nn" --json "$work/result.json" >"$work/$student.$nn.out" 2>&1 || true
        status=""
      fi
      for t in $(seq 1 "$n"); do
        local s=$status
        if [ -z "$s" ]; then
          s=$(sed -n "s/.*\"task\": $t,.*\"status\": \"\([a-z-]*\)\".*/\1/p" "$work/result.json" 2>/dev/null)
          s=${s:-no-result}
        fi
        row+=",$s"; total=$((total + 1))
        [ "$s" = pass ] && passed=$((passed + 1))
      done
    done
    [ -n "$refused" ] && notes+="$refused; "
    echo "$row,$passed,$total" >>"$out/grades.csv"
    echo "| $student | $passed / $total | ${notes%; } |" >>"$out/summary.md"
    echo "$student: $passed of $total tasks pass"
  done
  {
    echo
    echo "Per task, the share of students who pass it:"
    echo
    awk -F, 'NR == 1 { for (i = 2; i <= NF - 2; i++) name[i] = $i; next }
             { n++; for (i = 2; i <= NF - 2; i++) if ($i == "pass") ok[i]++ }
             END { for (i = 2; i in name; i++) printf "- %s: %d of %d\n", name[i], ok[i], n }' "$out/grades.csv"
  } >>"$out/summary.md"
  echo "wrote $out/grades.csv and $out/summary.md"
}

# ---- the teacher's class copy ------------------------------------------------------------------
# This tree without labs/solutions/: of a checkout what git tracks; of anything else (an unpacked
# release, a copy) every file but builds, runs and answers.
copy_without_answers() {   # DEST
  if is_checkout; then
    (cd "$root" && git ls-files -z | grep -z -v '^labs/solutions/' | tar --null -T - -cf -) | tar -xf - -C "$1"
  else
    tar -cf - -C "$root" --exclude='./build*' --exclude=./.git --exclude=./runs --exclude=./labs/solutions . | tar -xf - -C "$1"
  fi
}
cmd_class_copy() {
  [ $# -eq 1 ] || die "usage: scripts/lab.sh class-copy DIR"
  [ ! -e "$1" ] || die "class-copy: $1 exists; name a new directory"
  mkdir -p "$1"
  if ! copy_without_answers "$1" || [ ! -f "$1/scripts/lab.sh" ]; then
    rm -rf "$1"
    die "class-copy: copying $root to $1 failed (nothing is left in $1)"
  fi
  echo "wrote $1: this checkout's files without labs/solutions/ ($(cd "$1" && find . -type f | wc -l) files)"
}

# ---- two machines ------------------------------------------------------------------------------
cmd_pair() {
  [ $# -ge 2 ] || die "usage: scripts/lab.sh pair HOST_A HOST_B [--net SUBNET]"
  local a=$1 b=$2 net="" build=${PIPETRAIN_BUILD:-$root/build}
  shift 2
  [ "${1:-}" = --net ] && net=${2:-} && [ -n "$net" ] || [ $# -eq 0 ] || die "pair: --net SUBNET (e.g. 192.168.1.0/24)"
  command -v mpirun >/dev/null || die "pair: no mpirun on PATH (sudo apt-get install openmpi-bin libopenmpi-dev)"
  [ -x "$build/mpi_comm_worker" ] || die "pair: no $build/mpi_comm_worker (build pipetrain with MPI: scripts/test.sh)"
  # As scripts/mpirun.sh: root, more ranks than cores, a kernel without CMA (asked here: the
  # other machine is assumed alike).
  export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
  [ -n "${OMPI_MCA_btl_vader_single_copy_mechanism:-}" ] || "$root/scripts/cma_probe.py" 2>/dev/null ||
    export OMPI_MCA_btl_vader_single_copy_mechanism=none
  local mca=(--oversubscribe)
  [ -n "$net" ] && mca+=(--mca btl_tcp_if_include "$net" --mca oob_tcp_if_include "$net")
  echo "1. can mpirun start a process on each? (ssh, the same MPI on both)"
  if ! timeout 60 mpirun -np 2 -H "$a:1,$b:1" "${mca[@]}" hostname; then
    echo "pair: no. Check: 'ssh $b true' works without a prompt, mpirun is on $b's PATH for a non-interactive ssh," \
         "and the firewall lets TCP through between $a and $b (or name the network: --net SUBNET)"
    exit 1
  fi
  echo "2. do 4 ranks (2 on each) exchange messages, all-reduce with one thread's bits, and meet at a barrier?"
  if ! timeout 120 mpirun -np 4 -H "$a:2,$b:2" "${mca[@]}" "$build/mpi_comm_worker" exchange 20; then
    echo "pair: the processes started but did not talk. The usual cause: a second network (Docker, a VPN) that" \
         "the other machine cannot reach: name the shared one with --net SUBNET. $build must be the same path on both."
    exit 1
  fi
  echo "pair: $a and $b see each other; the room-of-machines step (docs/teaching.md) will run"
}

# ---- what each lab prints (docs/labs-expected.md) -----------------------------------------------
cmd_expected() {
  [ $# -ge 2 ] && [ "$1" = --build-dir ] || die "usage: scripts/lab.sh expected --build-dir BUILD [--check]"
  if [ "${3:-}" = --check ]; then   # times (a deadline, a measured wait) may differ between runs
    local doc=$root/docs/labs-expected.md norm='s/[0-9]+(\.[0-9]+)? (s|ms)\b/N \2/g'
    if diff <(sed -E "$norm" "$doc") <(cmd_expected --build-dir "$2" | sed -E "$norm"); then
      echo "docs/labs-expected.md is current"; exit 0
    fi
    echo "docs/labs-expected.md is stale: scripts/lab.sh expected --build-dir $2 > docs/labs-expected.md"; exit 1
  fi
  local build=$2 dir nn answers name
  echo "# What each lab's check prints"
  echo
  echo "Generated by \`scripts/lab.sh expected --build-dir build\` from the answers and the planted mistakes"
  echo "of \`labs/solutions/\` (ctest \`lab_expected\` fails when this file is stale). Timings are left out."
  for dir in $(all_labs); do
    nn=$(lab_nn "$dir"); answers=$root/labs/solutions/$(basename "$dir")
    [ -d "$answers" ] || continue
    echo
    echo "## $(sed -n '1s/^# //p' "$dir/README.md")"
    echo
    echo "A finished lab:"
    echo
    echo '```'
    "$build/lab_${nn}_solution" 2>&1 | sed -E 's/ \([0-9.]+ s\)$//' || true
    echo '```'
    for name in $(sed -n 's/^mistake: *//p' "$answers/mistakes.txt" 2>/dev/null); do
      echo
      echo "Mistake \`$name\`: \`$(mistake_field "$answers/mistakes.txt" "$name" line)\` written as"
      echo "\`$(mistake_field "$answers/mistakes.txt" "$name" becomes)\` gets:"
      echo
      echo '```'
      "$build/lab_${nn}_mistake_$name" 2>&1 | grep -E "^  (FAIL|todo) |^       " || true
      echo '```'
    done
  done
}

# ---- the kit's own proof (ctest labkit_NN) -----------------------------------------------------
# mistakes.txt: blocks of "mistake: NAME", "line: TEXT" (a line of the answer, exactly, without its
# indentation), "becomes: TEXT", "hint: TEXT" (what the check must print for it).
mistake_field() {   # mistake_field FILE NAME FIELD
  awk -v name="$2" -v field="$3" '
    /^mistake: / { on = (substr($0, 10) == name) }
    on && index($0, field ": ") == 1 { print substr($0, length(field) + 3); exit }' "$1"
}

cmd_plant() {
  [ $# -eq 3 ] || die "usage: scripts/lab.sh plant NN MISTAKE OUTDIR"
  local dir answers name=$2 out=$3 line becomes f found=0
  dir=$(lab_dir "$1")
  answers=$root/labs/solutions/$(basename "$dir")
  [ -f "$answers/mistakes.txt" ] || die "plant: $answers/mistakes.txt: missing (the answers are in the teachers' checkout, not in a class copy)"
  line=$(mistake_field "$answers/mistakes.txt" "$name" line)
  becomes=$(mistake_field "$answers/mistakes.txt" "$name" becomes)
  [ -n "$line" ] && [ -n "$becomes" ] || die "$answers/mistakes.txt: mistake $name needs a line: and a becomes:"
  mkdir -p "$out"
  for f in $(student_files "$dir"); do
    [[ $f == *.cpp ]] || continue
    local n=0 l trimmed
    while IFS= read -r l || [ -n "$l" ]; do
      trimmed=${l#"${l%%[![:space:]]*}"}
      if [ "$trimmed" = "$line" ]; then printf '%s%s\n' "${l%%[![:space:]]*}" "$becomes"; n=$((n + 1)); else printf '%s\n' "$l"; fi
    done <"$answers/$f" >"$out/$f.tmp"
    found=$((found + n))
    mv "$out/$f.tmp" "$out/$f"
  done
  [ "$found" = 1 ] || die "$answers/mistakes.txt: mistake $name: its line is in $found places of the answer (expected exactly 1)"
}

cmd_kit() {
  [ $# -eq 3 ] && [ "$2" = --build-dir ] || die "usage: scripts/lab.sh kit NN --build-dir BUILD"
  local dir nn build=$3 answers out bad=0 f
  dir=$(lab_dir "$1"); nn=$(lab_nn "$dir")
  answers=$root/labs/solutions/$(basename "$dir")
  [ -d "$answers" ] || { echo "skipped: no $answers (a class copy)"; exit 77; }
  out=$(mktemp); trap "rm -f '$out'" EXIT
  # 1. The starter, as committed, fails every task with "not implemented".
  local edited=""
  if is_checkout; then
    for f in $(student_files "$dir"); do
      git -C "$root" diff --quiet HEAD -- "labs/$(basename "$dir")/$f" 2>/dev/null || edited+=" $f"
    done
  fi
  if [ -n "$edited" ]; then
    echo "starter: skipped, you have edited it ($edited ); the kit checks the committed starter"
  else
    "$build/lab_$nn" >"$out" 2>&1 && { cat "$out"; echo "KIT FAIL: the starter passes its check"; bad=1; }
    if grep -q "nothing implemented yet" "$out" && ! grep -q -E "^  (pass|FAIL) " "$out"; then
      echo "starter: every task says not implemented"
    else
      cat "$out"; echo "KIT FAIL: the starter should fail every task with 'not implemented'"; bad=1
    fi
  fi
  # 2. The answer passes every task.
  if "$build/lab_${nn}_solution" >"$out" 2>&1; then
    echo "answer: $(tail -1 "$out")"
  else
    cat "$out"; echo "KIT FAIL: the answer in $answers does not pass"; bad=1
  fi
  # 3. The README's deliverable commands on the check (scripts/lab.sh check NN --FLAG ...) run on the answer.
  local flags
  while IFS= read -r flags; do
    if timeout 300 "$build/lab_${nn}_solution" $flags >"$out" 2>&1; then
      echo "answer, $(basename "$dir")/README.md's 'check $nn $flags': $(grep -c '' "$out") lines, exit 0"
    else
      cat "$out"; echo "KIT FAIL: the README's 'scripts/lab.sh check $nn $flags' fails on the answer"; bad=1
    fi
  done < <(sed -n -E "s/^scripts\/lab\.sh check $nn (--[^#]*[^ #]).*/\1/p" "$dir/README.md")
  # 4. Each planted mistake fails with its hint.
  local name hint
  for name in $(sed -n 's/^mistake: *//p' "$answers/mistakes.txt" 2>/dev/null); do
    hint=$(mistake_field "$answers/mistakes.txt" "$name" hint)
    if "$build/lab_${nn}_mistake_$name" >"$out" 2>&1; then
      cat "$out"; echo "KIT FAIL: mistake $name passes the check"; bad=1
    elif [ -n "$hint" ] && grep -q -F -- "$hint" "$out"; then
      echo "mistake $name: fails with its hint; the check printed:"
      grep -E "^  (FAIL|todo) |^       " "$out" | sed 's/^/    /'
    else
      cat "$out"; echo "KIT FAIL: mistake $name fails, but without its hint \"$hint\""; bad=1
    fi
  done
  [ "$bad" = 0 ] && echo "lab $nn: the kit works"
  exit "$bad"
}

[ $# -ge 1 ] || { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
sub=$1; shift
case $sub in
  list) cmd_list ;;
  check) cmd_check "$@" ;;
  submit) cmd_submit "$@" ;;
  grade) cmd_grade "$@" ;;
  class-copy) cmd_class_copy "$@" ;;
  kit) cmd_kit "$@" ;;
  pair) cmd_pair "$@" ;;
  expected) cmd_expected "$@" ;;
  plant) cmd_plant "$@" ;;
  -h|--help|help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) die "unknown command '$sub' (list, check, submit, grade, class-copy; kit and plant for the build)" ;;
esac
