#!/usr/bin/env bash
# The README's pictures, generated (never drawn by hand): a short 4-stage ZB-H1 run of the tiny
# model on the bundled sample, `pipetrain plot` of it (loss, tok/s, the measured timeline above
# the simulated one), and `pipetrain schedule --svg` of ZB-V; PNG copies in docs/img/ need
# rsvg-convert (Debian's librsvg2-bin).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target pipetrain >/dev/null
command -v rsvg-convert >/dev/null || { echo "make_pictures: needs rsvg-convert: apt-get install librsvg2-bin" >&2; exit 1; }
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
build/pipetrain train --preset tiny --data tests/fixtures/text/sample_zh.txt --stages 4 --micro-batches 8 --batch 32 \
  --seq 32 --steps 40 --eval-every 10 --schedule zb-h1 --trace "$run/timeline.json" --out "$run" >/dev/null
build/pipetrain plot "$run" >/dev/null
COLUMNS=100 build/pipetrain schedule --stages 4 --micro-batches 8 --schedule zbv --svg "$run/zbv.svg" >/dev/null
mkdir -p docs/img
for f in loss throughput timeline zbv; do rsvg-convert "$run/$f.svg" -o "docs/img/$f.png"; done
echo "make_pictures: wrote docs/img/{loss,throughput,timeline,zbv}.png"
