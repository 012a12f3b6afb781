#!/usr/bin/python3
# The PyTorch peer of scripts/bench_cpu.sh: the same shapes as pipetrain's step, written as plain
# PyTorch would (nn modules, every position's logits as Hugging Face's ErnieForMaskedLM, AdamW).
#
#   bench_cpu_peer.py inputs  --preset small --batch 16 --seq 128 --out F.safetensors
#       writes the fixed MLM batch both sides train on (15% of positions carry a label)
#   bench_cpu_peer.py train   --preset small --inputs F.safetensors --threads T --steps N [--logits labelled]
#       prints "tok/s X peak_rss_mib Y openblas_core Z" (steady steps: the first two are warm-up, not
#       timed; Z: the kernels OpenBLAS picked, e.g. Haswell or SkylakeX)
#   bench_cpu_peer.py gemm    --shapes 1024x1024x1024:nn,... --threads T --seconds S
#       prints "M N K ta tb GFLOP/s" per shape: OpenBLAS's sgemm through torch.mm
# The thread count must also be in OPENBLAS_NUM_THREADS before this starts (bench_cpu.sh sets it):
# torch.set_num_threads does not reach OpenBLAS.
import argparse
import json
import math
import resource
import struct
import sys
import time

try:
    import numpy as np
except ImportError:  # a pyenv or venv python without it: say how to get it, not a traceback
    sys.exit("scripts/bench_cpu_peer.py: needs numpy: sudo apt-get install python3-numpy, then run it as scripts/bench_cpu_peer.py (its shebang is /usr/bin/python3, Debian's python)")

PRESETS = {  # V, C, L, NH, I, max positions, token types: src/config.cpp
    "tiny": (4000, 64, 4, 4, 256, 128, 2),
    "small": (8000, 256, 6, 4, 1024, 512, 2),
    "ernie-3.0-nano-zh": (40000, 312, 4, 12, 1248, 2048, 4),
}


def write_inputs(path, preset, batch, seq, seed=1):
    V = PRESETS[preset][0]
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, V, size=(batch, seq), dtype=np.int64)
    labels = np.full((batch, seq), -100, dtype=np.int64)
    chosen = rng.random((batch, seq)) < 0.15
    labels[chosen] = ids[chosen]
    ids[chosen] = 3  # [MASK] in pipetrain's vocabularies
    tensors = {"input_ids": ids, "token_type_ids": np.zeros_like(ids),
               "attention_mask": np.ones_like(ids), "labels": labels}
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        b = t.tobytes()
        header[name] = {"dtype": "I64", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_inputs(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=np.int64).reshape(h["shape"])
    return out


def train(args):
    import torch
    from torch import nn
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    V, C, L, NH, I, P, types = PRESETS[args.preset]

    class Layer(nn.Module):  # post-LN, as BERT and ERNIE
        def __init__(self):
            super().__init__()
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.ln1, self.ln2 = nn.LayerNorm(C, eps=1e-12), nn.LayerNorm(C, eps=1e-12)
            self.up, self.down = nn.Linear(C, I), nn.Linear(I, C)

        def forward(self, x, bias):
            B, T, _ = x.shape
            q, k, v = self.qkv(x).view(B, T, 3, NH, C // NH).permute(2, 0, 3, 1, 4)
            att = (q @ k.transpose(-1, -2)) / math.sqrt(C // NH) + bias
            y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
            x = self.ln1(x + self.proj(y))
            return self.ln2(x + self.down(nn.functional.gelu(self.up(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.word, self.pos, self.token_type = nn.Embedding(V, C), nn.Embedding(P, C), nn.Embedding(types, C)
            self.ln = nn.LayerNorm(C, eps=1e-12)
            self.layers = nn.ModuleList(Layer() for _ in range(L))
            self.transform, self.ln_head = nn.Linear(C, C), nn.LayerNorm(C, eps=1e-12)
            self.decoder_bias = nn.Parameter(torch.zeros(V))

        def forward(self, ids, types_, mask, labels, labelled_only):
            T = ids.shape[1]
            x = self.ln(self.word(ids) + self.pos(torch.arange(T)) + self.token_type(types_))
            bias = (1.0 - mask[:, None, None, :].float()) * -1e4
            for layer in self.layers:
                x = layer(x, bias)
            labels = labels.reshape(-1)
            x = x.reshape(-1, C)
            if labelled_only:  # the head on the labelled positions only, as pipetrain does
                keep = labels != -100
                x, labels = x[keep], labels[keep]
            h = self.ln_head(nn.functional.gelu(self.transform(x)))
            logits = h @ self.word.weight.t() + self.decoder_bias  # tied weights
            return nn.functional.cross_entropy(logits, labels, ignore_index=-100)

    batch = {k: torch.from_numpy(v.copy()) for k, v in read_inputs(args.inputs).items()}
    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    B, T = batch["input_ids"].shape

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["labels"],
                     args.logits == "labelled")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    for _ in range(2):
        step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    dt = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"tok/s {args.steps * B * T / dt:.0f} peak_rss_mib {rss:.0f} openblas_core {openblas_core()}")


def openblas_core():
    """The kernel set OpenBLAS picked in this process (openblas_get_corename), or "none" when the
    BLAS torch loaded is not OpenBLAS: read where it is mapped, then ask the library itself."""
    import ctypes
    with open("/proc/self/maps") as maps:
        libs = {line.split()[-1] for line in maps if "blas" in line.split()[-1].lower()}
    for path in sorted(libs):
        try:
            get = ctypes.CDLL(path).openblas_get_corename
        except (OSError, AttributeError):
            continue
        get.restype = ctypes.c_char_p
        return get().decode()
    return "none"


def gemm(args):
    import torch
    torch.set_num_threads(args.threads)
    for shape in args.shapes.split(","):
        dims, flags = shape.split(":")
        M, N, K = map(int, dims.split("x"))
        ta, tb = flags[0] == "t", flags[1] == "t"
        a = torch.rand(K, M) if ta else torch.rand(M, K)
        b = torch.rand(N, K) if tb else torch.rand(K, N)
        opa = a.t() if ta else a
        opb = b.t() if tb else b
        c = torch.empty(M, N)
        for _ in range(3):
            torch.mm(opa, opb, out=c)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            torch.mm(opa, opb, out=c)
            n += 1
        dt = (time.perf_counter() - t0) / n
        print(f"{M} {N} {K} {int(ta)} {int(tb)} {2 * M * N * K / dt / 1e9:.1f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["inputs", "train", "gemm"])
    p.add_argument("--preset", default="small", choices=sorted(PRESETS))
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--out")
    p.add_argument("--inputs")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--shapes", default="1024x1024x1024:nn")
    p.add_argument("--seconds", type=float, default=0.5)
    p.add_argument("--logits", default="all", choices=["all", "labelled"],
                   help="all: every position's logits, as Hugging Face (the default); labelled: as pipetrain")
    args = p.parse_args()
    if args.what == "inputs":
        write_inputs(args.out, args.preset, args.batch, args.seq)
    elif args.what == "train":
        train(args)
    else:
        gemm(args)


if __name__ == "__main__":
    sys.exit(main())
