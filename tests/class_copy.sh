#!/usr/bin/env bash
# tests/class_copy.sh BUILD_DIR — ctest class_copy: scripts/lab.sh class-copy, the students' copy
# without the answers (docs/teaching.md, step 2):
#   1. of this checkout: every file git tracks but labs/solutions/ (in a copy that is no checkout,
#      every file but builds, runs and answers);
#   2. of a release unpacked, untracked, inside another git repository (a course's): its own files.
#      It asked git for that repository's list of the folder, got nothing, and failed without a word,
#      leaving an empty directory;
#   3. into a directory that exists: one line, a non-zero exit, nothing written.
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
rm -rf "$work"
echo "class_copy: the checkout, a release inside another repository and an existing directory: as expected"
