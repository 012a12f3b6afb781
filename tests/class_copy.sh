#!/usr/bin/env bash
# tests/class_copy.sh BUILD_DIR — ctest class_copy: scripts/lab.sh class-copy, the students' copy
# without the answers (docs/teaching.md, step 2):
#   1. of this checkout: every file git tracks but labs/solutions/ (in a copy that is no checkout,
#      every file but builds, runs and answers);
#   2. of a release unpacked, untracked, inside another git repository (a course's): its own files.
#      It asked git for that repository's list of the folder, got nothing, and failed without a word,
#      leaving an empty directory;
#   3. into a directory that exists: one line, a non-zero exit, nothing written;
#   4. in the class copy, submit and grade of a lab that does not exist, a flag without its value,
#      plant without the answers: one line, exit 2, nothing written.
set -euo pipefail
root=$(cd -P "$(dirname "$0")/.." && pwd -P)
work=$1/class_copy_test
rm -rf "$work" && mkdir -p "$work"
fail() { echo "class_copy: $*" >&2; exit 1; }
lab=$root/scripts/lab.sh

# ---- 1. this checkout --------------------------------------------------------------------------
bash "$lab" class-copy "$work/one" >"$work/one.log" 2>&1 || fail "class-copy of $root failed: $(cat "$work/one.log")"
for f in pipeline.hpp scripts/lab.sh labs/03_gpipe/gpipe.cpp; do [ -f "$work/one/$f" ] || fail "the copy lacks $f"; done
[ ! -e "$work/one/labs/solutions" ] || fail "the copy holds labs/solutions/"
if [ "$(git -C "$root" rev-parse --show-toplevel 2>/dev/null)" = "$root" ]; then
  want=$(cd "$root" && git ls-files | grep -c -v '^labs/solutions/')
  got=$(cd "$work/one" && find . ! -type d | wc -l)
  [ "$got" -eq "$want" ] || fail "the copy has $got files, git tracks $want outside labs/solutions/"
fi

# ---- 2. inside another repository, untracked there ---------------------------------------------
command -v git >/dev/null || { echo "skipped: no git for the course's repository"; exit 77; }
course=$work/course
git init -q "$course"
release=$course/vendor/pipetrain
mkdir -p "$release/scripts" "$release/labs/03_gpipe" "$release/labs/solutions/03_gpipe"
cp "$lab" "$release/scripts/lab.sh"
echo "readme" >"$release/README.md"
echo "// the student's file" >"$release/labs/03_gpipe/gpipe.cpp"
echo "// the answer" >"$release/labs/solutions/03_gpipe/gpipe.cpp"
bash "$release/scripts/lab.sh" class-copy "$work/two" >"$work/two.log" 2>&1 ||
  fail "class-copy of a release inside another repository failed: $(cat "$work/two.log")"
for f in README.md scripts/lab.sh labs/03_gpipe/gpipe.cpp; do [ -f "$work/two/$f" ] || fail "the release's copy lacks $f"; done
[ ! -e "$work/two/labs/solutions" ] || fail "the release's copy holds labs/solutions/"

# ---- 3. a directory that exists ------------------------------------------------------------------
mkdir "$work/three"
if bash "$lab" class-copy "$work/three" >"$work/three.log" 2>&1; then fail "class-copy into an existing directory succeeded"; fi
[ "$(wc -l <"$work/three.log")" -eq 1 ] || fail "expected one line, got: $(cat "$work/three.log")"
grep -q "exists; name a new directory" "$work/three.log" || fail "unexpected message: $(cat "$work/three.log")"
[ -z "$(ls -A "$work/three")" ] || fail "something was written into the existing directory"

# ---- 4. a student's or a teacher's slip, in the class copy: one line, exit 2, nothing written ----
# submit --labs 99 wrote an empty submission and exited 0 (the lab's error was lost in a $( )); a
# flag without its value ended in bash's "$2: unbound variable"; plant without the answers in awk's.
cd "$work/one"
expect_refused() {   # MESSAGE COMMAND...
  local message=$1; shift
  local code=0
  "$@" >"$work/four.log" 2>&1 || code=$?
  [ "$code" -eq 2 ] || fail "$* exited $code (expected 2): $(cat "$work/four.log")"
  [ "$(wc -l <"$work/four.log")" -eq 1 ] || fail "$*: expected one line, got: $(cat "$work/four.log")"
  grep -q -F -- "$message" "$work/four.log" || fail "$*: unexpected message: $(cat "$work/four.log")"
}
expect_refused "lab 99: no such lab" bash scripts/lab.sh submit --name bob --labs 99 --out "$work/s.tar.gz"
expect_refused "lab 99: no such lab" bash scripts/lab.sh submit --name bob --labs 03,99 --out "$work/s.tar.gz"
[ ! -e "$work/s.tar.gz" ] || fail "submit --labs 99 wrote $work/s.tar.gz"
expect_refused "--name: needs a value" bash scripts/lab.sh submit --name
expect_refused "--labs: needs a value" bash scripts/lab.sh grade "$work" --labs
mkdir "$work/subs"
expect_refused "lab 99: no such lab" bash scripts/lab.sh grade "$work/subs" --labs 99 --out "$work/grades"
[ ! -e "$work/grades" ] || fail "grade --labs 99 made $work/grades"
expect_refused "mistakes.txt: missing (the answers are in the teachers' checkout" bash scripts/lab.sh plant 03 x "$work/planted"
cd "$root"
rm -rf "$work"
echo "class_copy: the checkout, a release inside another repository, an existing directory and slips in a class copy: as expected"
