#!/usr/bin/env bash
# The main job: train the tiny Chinese model on the Tang and Song poems through a 4-stage
# 1F1B pipeline (stages are threads), printing progress, then write the measured timeline.
# Extra arguments are passed to `pipetrain train` (e.g. --steps 50).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target pipetrain
bash scripts/prepare_corpus.sh
# Each run gets a directory of its own; runs/poems points at the latest (an earlier run is never
# replaced), and the run's log is kept beside its model as train.log.
out=runs/poems-$(date +%Y%m%d-%H%M%S)
while [ -e "$out" ]; do out=$out-again; done
mkdir -p "$out"
build/pipetrain train --preset tiny --data data/poems.txt --out "$out" \
  --stages 4 --micro-batches 8 --batch 32 --seq 64 --schedule 1f1b --recompute none \
  --steps 600 --lr 2e-3 --partition time --dropout 0.1 --seed 1234 --trace "$out/timeline.json" "$@" \
  2>&1 | tee -i "$out/train.log"
if [ -L runs/poems ] || [ ! -e runs/poems ]; then
  ln -sfn "$(basename "$out")" runs/poems
  latest="runs/poems -> $out"
else
  latest="runs/poems is an earlier run's directory, left as it was"
fi
echo "model: $out (config.json, vocab.txt, model.safetensors, train.log); timeline: $out/timeline.json (open in https://ui.perfetto.dev); $latest"
