#!/usr/bin/env bash
# Turns Debian's fortunes-zh Tang and Song poems into data/poems.txt: one line of text per
# line of the poems (title, author, verses), ANSI colour codes stripped, '%' separators dropped.
set -euo pipefail
cd "$(dirname "$0")/.."
src=/usr/share/games/fortunes
out=${1:-data/poems.txt}
for f in tang300 song100; do
  [ -r "$src/$f" ] || { echo "prepare_corpus: $src/$f not found (apt-get install fortunes-zh)" >&2; exit 1; }
done
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
cat "$src/tang300" "$src/song100" | sed -e 's/\x1b\[[0-9;]*m//g' -e 's/[[:space:]]*$//' | grep -v '^%$' | grep -v '^$' > "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "prepare_corpus: $(wc -l < "$out") lines, $(wc -c < "$out") bytes -> $out"
