#!/usr/bin/env python3
"""Puts our flash attention next to PyTorch's: for every `attention_*_flash*` row of a
pipetrain-bench table (argv[1]), times torch.nn.functional.scaled_dot_product_attention on the
same shape (fp32, CUDA, forward; forward + backward for the backward row) and prints one table
row with ratio = SDPA time / our time. Prints nothing when torch or a GPU is missing: PyTorch
is a reference for this benchmark only, never a dependency of pipetrain."""
import re
import sys

try:
    import torch
except ImportError:
    sys.exit(0)
if not torch.cuda.is_available():
    sys.exit(0)


def median_ms(fn, reps=20):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return sorted(times)[len(times) // 2]


row = re.compile(r"^\| (attention_(forward|backward)_flash(?:_tc)? v[23]) \| B(\d+) T(\d+) NH(\d+) HS(\d+)( causal)? \| ([0-9.]+) \|")
for line in open(sys.argv[1], encoding="utf-8"):
    m = row.match(line)
    if not m:
        continue
    name, kind, B, T, NH, HS, causal, ours = m.group(1), m.group(2), *map(int, m.group(3, 4, 5, 6)), bool(m.group(7)), float(m.group(8))
    q, k, v = (torch.randn(B, NH, T, HS, device="cuda", requires_grad=kind == "backward") for _ in range(3))
    sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if kind == "forward":
        ms = median_ms(sdpa)
    else:   # backward alone = (forward + backward) - forward
        out = sdpa()
        grad = torch.randn_like(out)
        ms = median_ms(lambda: torch.autograd.grad(sdpa(), (q, k, v), grad)) - median_ms(sdpa)
    shape = f"B{B} T{T} NH{NH} HS{HS}" + (" causal" if causal else "")
    # The target, for the forward the model uses (v3).
    goal = f">= 0.35 {'met' if ms / ours >= 0.35 else 'MISSED'}" if name.endswith("v3") else ""
    print(f"| {name} vs torch {torch.__version__} SDPA fp32 | {shape} | {ours:.3f} | SDPA {ms:.3f} ms | {ms / ours:.2f} | torch SDPA | {goal} |")
