#!/usr/bin/env python3
# labs/05_recompute/fastest_step.py NONE_DIR FULL_DIR: the deliverable's table rows from the
# metrics.jsonl of two `pipetrain train` runs (--recompute none, then full), Python's standard
# library alone. Per rank: the compute time of its fastest step (the step least disturbed by other
# programs on the machine) and its peak stash bytes.
import json, sys


def per_rank(run_dir):
    steps = [json.loads(line) for line in open(run_dir + '/metrics.jsonl') if '"ranks"' in line]
    ranks = range(len(steps[0]['ranks']))
    fastest = [min(s['ranks'][r]['busy_us'] for s in steps) / 1000 for r in ranks]
    stash = [max(s['ranks'][r]['peak_stash_bytes'] for s in steps) for r in ranks]
    return fastest, stash


(none_ms, none_bytes), (full_ms, full_bytes) = per_rank(sys.argv[1]), per_rank(sys.argv[2])
for r in range(len(none_ms)):
    print('| %d | %.1f | %.1f | %.2f | 1.33 | %d | %d | %.2f |' % (r, none_ms[r], full_ms[r], full_ms[r] / none_ms[r],
          none_bytes[r], full_bytes[r], full_bytes[r] / none_bytes[r]))
