#!/usr/bin/env bash
# tests/lab_grade.sh BUILD_DIR — ctest lab_grade: scripts/lab.sh submit packs what it should, and
# scripts/lab.sh grade, on three made-up submissions of labs 03 and 04 (one full, one partial, one
# that does not compile), writes the CSV below. The expected rows are written here from what each
# submission holds, not from a run of the grader:
#   full:    both answers                                   -> every task passes (7 of 7)
#   partial: lab 03's answer, lab 04 with its warm-up one too long (the kit's mistake
#            warmup_too_long: its warm-up count and its peak stash are wrong, the schedule is
#            still valid and exact)                          -> 03: 3 pass; 04: fail pass fail pass
#   broken:  lab 03 with a syntax error, lab 04 not sent    -> 03: build-error x 3; 04: the
#            starter's todo x 4 (0 of 7)
# and the grader never reads a submission's results.json (the broken one claims every task).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$1
work=$build/lab_grade_test
rm -rf "$work" && mkdir -p "$work/subs"
sol=$root/labs/solutions
[ -d "$sol" ] || { echo "skipped: no labs/solutions (a class copy)"; exit 77; }

# A submission as scripts/lab.sh submit lays it out: labs/NN_topic/FILE and results.json.
make_submission() {   # NAME, then pairs DEST SOURCE
  local name=$1 dir=$work/make/$1
  shift
  mkdir -p "$dir"
  while [ $# -gt 0 ]; do
    mkdir -p "$dir/$(dirname "$1")"
    cp "$2" "$dir/$1"
    shift 2
  done
  echo '{"labs": [{"lab": "03", "tasks": [{"task": 1, "status": "pass"}]}]}' >"$dir/results.json"
  tar -czf "$work/subs/submission-$name.tar.gz" -C "$dir" .
}
make_submission full labs/03_gpipe/gpipe.cpp "$sol/03_gpipe/gpipe.cpp" \
                     labs/04_1f1b/one_f_one_b.cpp "$sol/04_1f1b/one_f_one_b.cpp"
bash "$root/scripts/lab.sh" plant 04 warmup_too_long "$work/planted"
make_submission partial labs/03_gpipe/gpipe.cpp "$sol/03_gpipe/gpipe.cpp" \
                        labs/04_1f1b/one_f_one_b.cpp "$work/planted/one_f_one_b.cpp"
sed 's/return schedule;/return schedule/' "$sol/03_gpipe/gpipe.cpp" >"$work/broken.cpp"
make_submission broken labs/03_gpipe/gpipe.cpp "$work/broken.cpp"
# A path that leaves the submission must be refused, never written.
mkdir -p "$work/make/evil/labs/03_gpipe"
cp "$sol/03_gpipe/gpipe.cpp" "$work/make/evil/labs/03_gpipe/gpipe.cpp"
tar -czf "$work/subs/submission-evil.tar.gz" -C "$work/make/evil" . --transform='s|^\./labs/03_gpipe/gpipe.cpp|../../escaped.cpp|'

bash "$root/scripts/lab.sh" grade "$work/subs" --labs 03,04 --out "$work/grades"

expected="student,03.1,03.2,03.3,04.1,04.2,04.3,04.4,passed,tasks
broken,build-error,build-error,build-error,todo,todo,todo,todo,0,7
evil,refused,refused,refused,refused,refused,refused,refused,0,7
full,pass,pass,pass,pass,pass,pass,pass,7,7
partial,pass,pass,pass,fail,pass,fail,pass,5,7"
got=$(cat "$work/grades/grades.csv")
if [ "$got" != "$expected" ]; then
  echo "FAIL: grades.csv differs"
  diff <(echo "$expected") <(echo "$got") || true
  exit 1
fi
[ ! -e "$work/escaped.cpp" ] && [ ! -e "$work/grades/escaped.cpp" ] || { echo "FAIL: a path left the submission"; exit 1; }
grep -q "lab 03 does not compile" "$work/grades/summary.md" || { echo "FAIL: summary.md does not say why broken has 0"; exit 1; }

# submit, in the grader's copy (its library is built): lab 03 answered, lab 04 the starter.
tree=$work/grades/work/tree
cp "$sol/03_gpipe/gpipe.cpp" "$tree/labs/03_gpipe/gpipe.cpp"
cp "$root/labs/04_1f1b/one_f_one_b.cpp" "$tree/labs/04_1f1b/one_f_one_b.cpp"
(cd "$work" && PIPETRAIN_BUILD=$work/grades/work/build bash "$tree/scripts/lab.sh" submit --labs 03,04 --name alice)
listing=$(tar -tzf "$work/submission-alice.tar.gz" | sort | tr '\n' ' ')
for f in ./results.json ./labs/03_gpipe/gpipe.cpp ./labs/03_gpipe/answers.md ./labs/04_1f1b/one_f_one_b.cpp ./labs/04_1f1b/answers.md; do
  case " $listing" in *" $f "*) ;; *) echo "FAIL: submit packed no $f ($listing)"; exit 1 ;; esac
done
tar -xzf "$work/submission-alice.tar.gz" -C "$work" ./results.json
[ "$(grep -c '"pass"' "$work/results.json")" = 3 ] && [ "$(grep -c '"todo"' "$work/results.json")" = 4 ] ||
  { echo "FAIL: results.json should say 3 pass (lab 03) and 4 todo (lab 04):"; cat "$work/results.json"; exit 1; }
grep -q '"machine"' "$work/results.json" && grep -q '"check_version"' "$work/results.json" ||
  { echo "FAIL: results.json names no machine or check version"; exit 1; }
echo "submit packed: $listing"

echo "grades.csv is the expected one:"
echo "$got"
cat "$work/grades/summary.md"
