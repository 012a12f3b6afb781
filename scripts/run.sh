#!/usr/bin/env bash
# The main job: train a small Chinese model on the Tang and Song poems through a 1F1B pipeline
# (stages are threads), printing progress, then write the measured timeline.
# Extra arguments are passed to `pipetrain train` (e.g. --steps 50, --objective causal).
#
# The pipeline fits the machine: 4 stages where there are 4 cores or more, else 2, so that no two
# stages share a core (threads that take turns on a core wait for each other, and the bubble then
# measures the machine, not the schedule). The tiny preset gets 7 blocks: with the embedding (almost
# free) and the head (about one block's cost) that is 8 units of work of about one block each,
# which 2, 4 or 8 stages split evenly.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${PIPETRAIN_BUILD_DIR:-build}   # the tests point this at their own build
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target pipetrain
bash scripts/prepare_corpus.sh
stages=2
[ "$(nproc)" -ge 4 ] && stages=4
# A causal model goes to runs/poems-causal: runs/poems stays the masked model that fill-mask reads.
name=poems
dry=0
for arg in "$@"; do
  [ "$arg" = causal ] && name=poems-causal
  [ "$arg" = --dry-run ] && dry=1   # the flags checked and the pipeline planned; nothing written
done
# Each run gets a directory of its own; runs/$name points at the latest (an earlier run is never
# replaced), and the run's log is kept beside its model as train.log.
out=runs/$name-$(date +%Y%m%d-%H%M%S)
while [ -e "$out" ]; do out=$out-again; done
flags=(--preset tiny --blocks 7 --data data/poems.txt --out "$out"
       --stages "$stages" --micro-batches 8 --batch 32 --seq 64 --schedule 1f1b --recompute none
       --steps 600 --lr 2e-3 --dropout 0.1 --seed 1234 --trace "$out/timeline.json")
if [ "$dry" = 1 ]; then
  exec "$build/pipetrain" train "${flags[@]}" "$@"
fi
mkdir -p "$out"
echo "run.sh: $(nproc) cores, so $stages stages (one core each); writing $out"
"$build/pipetrain" train "${flags[@]}" "$@" 2>&1 | tee -i "$out/train.log"
if [ -L "runs/$name" ] || [ ! -e "runs/$name" ]; then
  ln -sfn "$(basename "$out")" "runs/$name"
  latest="runs/$name -> $out"
else
  latest="runs/$name is an earlier run's directory, left as it was"
fi
echo "model: $out (config.json, vocab.txt, model.safetensors, train.log); timeline: $out/timeline.json (open in https://ui.perfetto.dev); $latest"
