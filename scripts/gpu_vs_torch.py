#!/usr/bin/python3
"""Training speed of pipetrain against PyTorch on the same GPU, the same shapes and the same batch.

    python3 scripts/gpu_vs_torch.py [--pipetrain build-gpu/pipetrain] [--device cuda|cpu]
        [--shapes small,ernie-3.0-nano-zh] [--batch 32] [--seq 128] [--steps 10] [--warmup 3]
        [--budget 150] [--out DIR]

The peer is a plain PyTorch ERNIE/BERT masked-LM model (`ErnieMLM` below: post-LayerNorm, exact
GELU, decoder tied to the word embedding, the logits of *every* position, as Hugging Face's
ErnieForMaskedLM computes them, cross-entropy over the labelled ones), trained with AdamW and a
gradient-norm clip of 1.0 like pipetrain. It runs eager and, where it works, under torch.compile,
in fp32 (TF32 off, PyTorch's default for matmuls) and under bf16 autocast. pipetrain trains the
same fixed batch (`train --inputs`, written here) with `--device cuda`, on 1 stage and on 4 stages
sharing the one GPU, fp32 and `--dtype bf16`.

Every run is its own process (a fresh CUDA context, an honest peak memory, a torch.compile
failure that cannot take the others down) and gets at most what is left of --budget seconds;
the runs that no longer fit are listed as skipped. tok/s counts the timed steps only (after
--warmup steps): pipetrain's step lines give the time at each step (steps · B · T / tok/s).
Peak GPU memory: nvidia-smi's memory.used during the run minus what was used before it (so
both sides include their CUDA context and their allocator's cache), and for PyTorch also
torch.cuda.max_memory_allocated. Prints a markdown table on stdout (scripts/gpu_check.sh appends
it to docs/gpu-results.md); exit status 1 when a run failed, 0 otherwise (a skipped run is not a
failure). The parameter names of ErnieMLM are Hugging Face's, so scripts/hf_interop.py can use it
as a stand-in for transformers (--selftest).
"""
import argparse
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time

try:
    import numpy as np
except ImportError:   # one line, like a missing torch or transformers
    print("gpu_vs_torch.py: skipped: needs numpy (this python: " + sys.executable + ")")
    sys.exit(77)

# The presets of src/config.cpp (checked against what pipetrain prints for each run).
PRESETS = {
    "tiny": dict(vocab_size=4000, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=256,
                 max_position_embeddings=128, type_vocab_size=2, task_type_vocab_size=0, use_task_id=False),
    "small": dict(vocab_size=8000, hidden_size=256, num_hidden_layers=6, num_attention_heads=4, intermediate_size=1024,
                  max_position_embeddings=512, type_vocab_size=2, task_type_vocab_size=0, use_task_id=False),
    "ernie-3.0-nano-zh": dict(vocab_size=40000, hidden_size=312, num_hidden_layers=4, num_attention_heads=12,
                              intermediate_size=1248, max_position_embeddings=2048, type_vocab_size=4,
                              task_type_vocab_size=16, use_task_id=True),
}
SPECIAL = {"pad": 0, "cls": 1, "sep": 2, "mask": 3}   # pipetrain's placeholder vocab for a preset

# ---- safetensors (the little that is needed: I64/F32 write, F32/I64 read) ---------------------

def write_safetensors(path, tensors):
    """tensors: {name: numpy array (int64 or float32)}, written in the official writer's layout."""
    kinds = {"i8": "I64", "f4": "F32"}
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        dt = kinds[a.dtype.str[1:]]
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    os.replace(tmp, path)


def read_safetensors(path):
    """{name: numpy array} for F32, F64, I64, I32 tensors."""
    kinds = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4"}
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=kinds[info["dtype"]]).reshape(info["shape"])
    return out


def fixed_batch(cfg, B, T, seed=0, padded=False):
    """A masked-LM batch like pipetrain's: [CLS] ids… [SEP], token types 0 then 1, 15% of the
    positions masked (label = the original id), task ids when the model has them. With padded,
    rows get shorter (right padding with [PAD], attention_mask 0) so that masks are exercised."""
    rng = np.random.default_rng(seed)
    V = cfg["vocab_size"]
    ids = rng.integers(5, V, size=(B, T), dtype=np.int64)
    lengths = np.full(B, T) if not padded else np.maximum(3, T - rng.integers(0, T // 2, size=B))
    lengths[0] = T
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64)
    ids[:, 0] = SPECIAL["cls"]
    ids[np.arange(B), lengths - 1] = SPECIAL["sep"]
    types = np.zeros((B, T), dtype=np.int64)
    if cfg["type_vocab_size"] > 1:
        types[:, T // 2:] = 1
    labels = np.full((B, T), -100, dtype=np.int64)
    chosen = (rng.random((B, T)) < 0.15) & (mask == 1)
    chosen[:, 0] = False
    chosen[np.arange(B), lengths - 1] = False
    chosen[:, 1] |= True   # at least one target per row
    labels[chosen] = ids[chosen]
    ids[chosen] = SPECIAL["mask"]
    ids[mask == 0] = SPECIAL["pad"]
    types[mask == 0] = 0
    out = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "labels": labels}
    if cfg.get("use_task_id"):
        out["task_type_ids"] = (rng.integers(0, cfg["task_type_vocab_size"], size=(B, 1)) * mask).astype(np.int64)
    return out


# ---- the PyTorch peer ---------------------------------------------------------------------------

def build_peer_classes(torch):
    """The model classes, built once torch is imported (this file must load without torch)."""
    nn, F = torch.nn, torch.nn.functional
    sdpa = getattr(F, "scaled_dot_product_attention", None)

    class Embeddings(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"])
            self.position_embeddings = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])
            self.token_type_embeddings = nn.Embedding(c["type_vocab_size"], c["hidden_size"])
            if c["use_task_id"]:
                self.task_type_embeddings = nn.Embedding(c["task_type_vocab_size"], c["hidden_size"])
            self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
            self.dropout = nn.Dropout(c["hidden_dropout_prob"])

        def forward(self, ids, types, tasks):
            T = ids.shape[1]
            x = self.word_embeddings(ids) + self.position_embeddings.weight[:T] + self.token_type_embeddings(types)
            if hasattr(self, "task_type_embeddings"):   # no task ids given = task 0, as HF does
                x = x + (self.task_type_embeddings(tasks) if tasks is not None else self.task_type_embeddings.weight[0])
            return self.dropout(self.LayerNorm(x))   # (B, T, C)

    class SelfAttention(nn.Module):
        def __init__(self, c):
            super().__init__()
            C = c["hidden_size"]
            self.nh, self.p = c["num_attention_heads"], c["attention_probs_dropout_prob"]
            self.query, self.key, self.value = nn.Linear(C, C), nn.Linear(C, C), nn.Linear(C, C)

        def forward(self, x, bias, causal):
            B, T, C = x.shape
            q, k, v = (l(x).view(B, T, self.nh, C // self.nh).transpose(1, 2) for l in (self.query, self.key, self.value))
            p = self.p if self.training else 0.0
            if bias is not None:
                bias = bias.to(q.dtype)   # autocast: q is bf16
            if sdpa is not None and not causal:   # (B, nh, T, hs)
                y = sdpa(q, k, v, attn_mask=bias, dropout_p=p)
            else:
                att = q @ k.transpose(-1, -2) / math.sqrt(C // self.nh)   # (B, nh, T, T)
                if bias is not None:
                    att = att + bias
                if causal:
                    att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
                y = F.dropout(att.softmax(-1), p).to(v.dtype) @ v   # CPU autocast keeps softmax in fp32
            return y.transpose(1, 2).reshape(B, T, C)

    class Sub(nn.Module):   # dense (+ LayerNorm): HF's *Output blocks
        def __init__(self, c, n_in, n_out, norm=True):
            super().__init__()
            self.dense = nn.Linear(n_in, n_out)
            if norm:
                self.LayerNorm = nn.LayerNorm(n_out, eps=c["layer_norm_eps"])

    class Attention(nn.Module):
        def __init__(self, c):
            super().__init__()
            setattr(self, "self", SelfAttention(c))   # HF's name: attention.self.query
            self.output = Sub(c, c["hidden_size"], c["hidden_size"])

    class Layer(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.attention = Attention(c)
            self.intermediate = Sub(c, c["hidden_size"], c["intermediate_size"], norm=False)
            self.output = Sub(c, c["intermediate_size"], c["hidden_size"])
            self.drop = nn.Dropout(c["hidden_dropout_prob"])
            self.act = F.gelu if c["hidden_act"] == "gelu" else F.relu   # gelu: the exact erf form

        def forward(self, x, bias, causal):   # post-LN
            a = self.attention.output
            x = a.LayerNorm(x + self.drop(a.dense(getattr(self.attention, "self")(x, bias, causal))))
            h = self.act(self.intermediate.dense(x))
            return self.output.LayerNorm(x + self.drop(self.output.dense(h)))

    class Encoder(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.layer = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))

    class Ernie(nn.Module):
        def __init__(self, c, pooler):
            super().__init__()
            self.embeddings = Embeddings(c)
            self.encoder = Encoder(c)
            if pooler:
                self.pooler = Sub(c, c["hidden_size"], c["hidden_size"], norm=False)

    class ErnieMLM(nn.Module):
        """ErnieForMaskedLM's computation and names; with num_labels, ErnieForSequenceClassification's."""
        def __init__(self, c):
            super().__init__()
            c = dict(dict(layer_norm_eps=1e-12, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                          hidden_act="gelu", num_labels=0, is_decoder=False), **c)
            self.c = c
            self.act = F.gelu if c["hidden_act"] == "gelu" else F.relu
            self.ernie = Ernie(c, pooler=c["num_labels"] > 0)
            if c["num_labels"] > 0:
                self.classifier = nn.Linear(c["hidden_size"], c["num_labels"])
            else:
                self.cls = nn.Module()
                self.cls.predictions = nn.Module()
                self.cls.predictions.transform = Sub(c, c["hidden_size"], c["hidden_size"])
                self.cls.predictions.bias = nn.Parameter(torch.zeros(c["vocab_size"]))

        def init_weights(self, std=0.02):
            for name, p in self.named_parameters():
                with torch.no_grad():
                    if "LayerNorm.weight" in name:
                        p.fill_(1.0)
                    elif name.endswith("bias"):
                        p.zero_()
                    else:
                        p.normal_(0.0, std)

        def forward(self, input_ids, token_type_ids, attention_mask=None, task_type_ids=None, labels=None,
                    hidden_states=False):
            """{"logits", "loss" (with labels), "hidden_states" (embedding output, each layer),
            "pooled_output"}: every position's logits (B, T, V), or (B, num_labels)."""
            causal = self.c["is_decoder"]
            bias = None   # no mask at all = every token is real (the caller decides: no graph break)
            if attention_mask is not None:
                # -1e4 where the key is padding, as pipetrain and the fixtures' reference do
                bias = (1.0 - attention_mask[:, None, None, :].float()) * -1e4   # (B, 1, 1, T)
            x = self.ernie.embeddings(input_ids, token_type_ids, task_type_ids)
            states = [x]
            for layer in self.ernie.encoder.layer:
                x = layer(x, bias, causal)
                states.append(x)
            out = {"last_hidden_state": x}
            if hidden_states:
                out["hidden_states"] = states
            if hasattr(self.ernie, "pooler"):
                out["pooled_output"] = torch.tanh(self.ernie.pooler.dense(x[:, 0]))
            if self.c["num_labels"] > 0:
                logits = self.classifier(out["pooled_output"])   # (B, num_labels)
            else:
                t = self.cls.predictions.transform   # the head's activation is hidden_act too
                h = t.LayerNorm(self.act(t.dense(x)))
                logits = F.linear(h, self.ernie.embeddings.word_embeddings.weight, self.cls.predictions.bias)  # (B, T, V)
            out["logits"] = logits
            if labels is not None:
                flat = logits.float().reshape(-1, logits.shape[-1])
                out["loss"] = F.cross_entropy(flat, labels.reshape(-1), ignore_index=-100)
            return out

    return ErnieMLM


# ---- one PyTorch run (a child process) ------------------------------------------------------

def torch_run(spec):
    """spec: {shape, cfg, batch file, device, compile, bf16, steps, warmup, lr}. Returns a result dict."""
    import torch
    ErnieMLM = build_peer_classes(torch)
    dev = torch.device(spec["device"])
    if spec["bf16"] and dev.type == "cpu" and int(torch.__version__.split(".")[0]) < 2:
        return {"skipped": f"bf16 autocast on the CPU: torch {torch.__version__} has no bf16 layer_norm there"}
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False   # fp32 means fp32 (PyTorch's default)
    torch.backends.cudnn.allow_tf32 = False
    model = ErnieMLM(spec["cfg"]).to(dev)
    model.init_weights()
    batch = {k: torch.from_numpy(np.array(v)).to(dev) for k, v in read_safetensors(spec["batch"]).items()}
    mask = None if bool(batch["attention_mask"].all()) else batch["attention_mask"]   # as HF's SDPA path drops it
    kw = {}
    if dev.type == "cuda" and "fused" in torch.optim.AdamW.__init__.__code__.co_varnames:
        kw["fused"] = True
    opt = torch.optim.AdamW(model.parameters(), lr=spec["lr"], betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, **kw)
    step_fn_model = model
    if spec["compile"]:
        if not hasattr(torch, "compile"):
            return {"skipped": f"torch {torch.__version__} has no torch.compile"}
        step_fn_model = torch.compile(model)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def step():
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=spec["bf16"]):
            loss = step_fn_model(batch["input_ids"], batch["token_type_ids"], mask,
                                 batch.get("task_type_ids"), batch["labels"])["loss"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    losses, t_first = [], None
    for i in range(spec["warmup"]):
        t = time.time()
        losses.append(float(step()))
        if i == 0:
            t_first = time.time() - t   # the first step (torch.compile compiles here)
    sync()
    t0 = time.time()
    timed = [step() for _ in range(spec["steps"])]
    sync()
    secs = time.time() - t0
    losses += [float(l) for l in timed]
    B, T = batch["input_ids"].shape
    res = {"tok_s": spec["steps"] * B * T / secs, "loss_first": losses[0], "loss_last": losses[-1],
           "first_step_s": t_first, "torch": torch.__version__,
           "attention": "SDPA" if hasattr(torch.nn.functional, "scaled_dot_product_attention") else "matmul-softmax",
           "adamw": "fused" if kw else "default", "params": sum(p.numel() for p in model.parameters())}
    if dev.type == "cuda":
        res["max_allocated"] = torch.cuda.max_memory_allocated()
    return res


# ---- peak GPU memory from nvidia-smi --------------------------------------------------------

class GpuMemory:
    """Polls nvidia-smi (memory.used of GPU 0, every 100 ms) while a run goes on; peak() is the
    largest value minus the one before the run started, in bytes, or None without nvidia-smi."""
    def __init__(self, enabled):
        self.proc, self.base, self.top = None, None, None
        if not enabled or not shutil.which("nvidia-smi"):
            return
        cmd = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"]
        try:
            self.base = float(subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.split()[0])
        except (subprocess.SubprocessError, IndexError, ValueError, OSError):
            return
        self.top = self.base
        self.proc = subprocess.Popen(cmd + ["-lms", "100"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.top = max(self.top, float(line.strip()))
            except ValueError:
                pass

    def peak(self):
        if self.proc is None:
            return None
        time.sleep(0.25)   # one more sample
        self.proc.terminate()
        self.proc.wait()
        return (self.top - self.base) * 2**20   # MiB


# ---- pipetrain runs -----------------------------------------------------------------------------

STEP = re.compile(r"^step (\d+)/(\d+) \| loss ([0-9.eE+-]+) .*\| ([0-9.]+) tok/s")
MODEL = re.compile(r"^model: (\d+) layers, hidden (\d+), heads (\d+), vocab (\d+), ([0-9.]+)M parameters")


def parse_pipetrain(text, B, T, warmup):
    """{tok_s, loss_first, loss_last, model} from pipetrain train's output. The step lines print
    the mean tok/s since the start, so step k ended at k·B·T / tok_s_k seconds; tok/s of the
    steps after `warmup` is their tokens over the time between."""
    steps = {}
    for line in text.splitlines():
        m = STEP.match(line)
        if m:
            steps[int(m.group(1))] = (float(m.group(3)), float(m.group(4)))
    if not steps:
        raise ValueError("no step lines in pipetrain's output")
    last = max(steps)
    first = warmup if warmup in steps and warmup < last else None
    at = lambda k: k * B * T / steps[k][1]   # seconds since the start when step k ended
    tok_s = (last - first) * B * T / (at(last) - at(first)) if first else steps[last][1]
    model = MODEL.search(text)
    return {"tok_s": tok_s, "loss_first": steps[min(steps)][0], "loss_last": steps[last][0],
            "model": tuple(int(model.group(i)) for i in range(1, 5)) + (float(model.group(5)),) if model else None}


def pipetrain_run(exe, spec, work, timeout):
    out_dir = os.path.join(work, "run-" + spec["name"].replace(" ", "_"))
    shutil.rmtree(out_dir, ignore_errors=True)
    cmd = [exe, "train", "--preset", spec["shape"], "--inputs", spec["batch"], "--out", out_dir,
           "--device", spec["device"], "--stages", str(spec["stages"]), "--micro-batches", str(spec["micro_batches"]),
           "--steps", str(spec["warmup"] + spec["steps"]), "--lr", str(spec["lr"]), "--dropout", "0.1",
           "--threads", str(min(8, os.cpu_count() or 1)), "--timeout", str(max(10, int(timeout)))]
    if spec["bf16"]:
        cmd += ["--dtype", "bf16"]
    mem = GpuMemory(spec["device"].startswith("cuda"))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        mem.peak()
        return {"skipped": f"cut short by the --budget after {timeout:.0f} s"}
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    peak = mem.peak()
    with open(os.path.join(work, spec["name"].replace(" ", "_") + ".log"), "w") as f:
        f.write(" ".join(cmd) + "\n" + p.stdout + p.stderr)
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {(p.stderr.strip().splitlines() or ['?'])[-1][:200]}"}
    B, T = spec["B"], spec["T"]
    res = parse_pipetrain(p.stdout, B, T, spec["warmup"])
    res["smi_peak"] = peak
    return res


def child_main(spec_json):
    spec = json.loads(spec_json)
    try:
        res = torch_run(spec)
    except Exception as e:   # a torch.compile failure, an out-of-memory, ...: one line
        res = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}
    print("RESULT " + json.dumps(res), flush=True)
    return 0


def torch_child(spec, work, timeout):
    mem = GpuMemory(spec["device"].startswith("cuda"))
    log = os.path.join(work, spec["name"].replace(" ", "_").replace(".", "_") + ".log")
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--_child", json.dumps(spec)],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        mem.peak()
        return {"skipped": f"cut short by the --budget after {timeout:.0f} s"}
    peak = mem.peak()
    with open(log, "w") as f:
        f.write(p.stdout + p.stderr)
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if not lines:
        return {"error": f"exit {p.returncode}: {(p.stderr.strip().splitlines() or ['no output'])[-1][:200]}"}
    res = json.loads(lines[-1][7:])
    res["smi_peak"] = peak
    return res


# ---- the table ----------------------------------------------------------------------------------

def gib(b):
    return f"{b / 2**30:.2f} GiB" if b is not None else "n/a"


def table(rows, header):
    out = [header, "",
           "| shape | precision | run | tok/s | vs torch eager | vs torch.compile | peak GPU memory | loss first → last |",
           "|---|---|---|---:|---:|---:|---|---|"]
    best = {}
    for r in rows:
        if "tok_s" in r["res"] and r["kind"] != "pipetrain":
            best[(r["shape"], r["precision"], r["kind"])] = r["res"]["tok_s"]
    for r in rows:
        res = r["res"]
        if "tok_s" not in res:
            why = f"FAILED: {res['error']}" if "error" in res else f"skipped: {res.get('skipped', '?')}"
            out.append(f"| {r['shape']} | {r['precision']} | {r['name']} | {why} | | | | |")
            continue
        ratio = lambda kind: (f"{res['tok_s'] / best[(r['shape'], r['precision'], kind)]:.2f}"
                              if (r["shape"], r["precision"], kind) in best else "n/a")
        mem = f"{gib(res['smi_peak'])} (nvidia-smi)" if res.get("smi_peak") is not None else "n/a"
        if res.get("max_allocated") is not None:
            mem += f", {gib(res['max_allocated'])} allocated"
        out.append(f"| {r['shape']} | {r['precision']} | {r['name']} | {res['tok_s']:.0f} | {ratio('torch eager')} | "
                   f"{ratio('torch.compile')} | {mem} | {res['loss_first']:.4f} → {res['loss_last']:.4f} |")
    return "\n".join(out)


def find_pipetrain(root):
    for d in ("build-gpu", "build", "build-release"):
        p = os.path.join(root, d, "pipetrain")
        if os.access(p, os.X_OK):
            return p
    for d in sorted(os.listdir(root)):
        p = os.path.join(root, d, "pipetrain")
        if d.startswith("build") and os.access(p, os.X_OK):
            return p
    return None


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--_child":
        return child_main(sys.argv[2])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipetrain", help="the pipetrain binary (default: build*/pipetrain)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--shapes", default="small,ernie-3.0-nano-zh", help="comma-separated presets: " + ", ".join(PRESETS))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (torch.compile compiles in the first)")
    ap.add_argument("--micro-batches", type=int, default=8, help="of the 4-stage pipetrain runs")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--budget", type=float, default=150, help="seconds for everything; runs that no longer fit are skipped")
    ap.add_argument("--only", default="", help="comma-separated words a run's name must contain one of (e.g. 'eager,1 stage')")
    ap.add_argument("--out", help="keep the logs of every run here (default: a temporary directory)")
    a = ap.parse_args()
    t_start = time.time()
    try:
        import torch  # noqa: F401  (only to fail early, with one line; the runs import it themselves)
    except ImportError:
        print("gpu_vs_torch.py: needs PyTorch (python3 -c 'import torch' fails); nothing measured")
        return 77
    exe = a.pipetrain or find_pipetrain(root)
    if not exe or not os.access(exe, os.X_OK):
        print("gpu_vs_torch.py: no pipetrain binary (build it, or give --pipetrain)", file=sys.stderr)
        return 2
    if a.device == "cuda" and not torch.cuda.is_available():
        print("gpu_vs_torch.py: --device cuda, but torch sees no GPU; nothing measured")
        return 77
    work = a.out or tempfile.mkdtemp(prefix="gpu_vs_torch.")
    os.makedirs(work, exist_ok=True)
    shapes = [s for s in a.shapes.split(",") if s]
    for s in shapes:
        if s not in PRESETS:
            ap.error(f"--shapes: unknown preset {s!r}")

    # The runs, most informative first: eager PyTorch and 1-stage pipetrain for every shape, then the
    # 4-stage pipelines, then torch.compile (the slowest to start).
    plan = []
    for s in shapes:
        cfg = dict(PRESETS[s], hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
        batch = os.path.join(work, f"batch-{s}.safetensors")
        write_safetensors(batch, fixed_batch(cfg, a.batch, a.seq, seed=1))
        base = dict(shape=s, cfg=cfg, batch=batch, device=a.device, steps=a.steps, warmup=a.warmup, lr=a.lr,
                    B=a.batch, T=a.seq)
        for prec in ("fp32", "bf16"):
            bf16 = prec == "bf16"
            plan.append((0, dict(base, name="pipetrain 1 stage", kind="pipetrain", stages=1, micro_batches=1, bf16=bf16, precision=prec)))
            plan.append((0, dict(base, name="torch eager", kind="torch eager", compile=False, bf16=bf16, precision=prec)))
            plan.append((1, dict(base, name=f"pipetrain 4 stages 1F1B M={a.micro_batches}", kind="pipetrain", stages=4,
                                 micro_batches=a.micro_batches, bf16=bf16, precision=prec)))
            plan.append((2, dict(base, name="torch.compile", kind="torch.compile", compile=True, bf16=bf16, precision=prec)))
    plan = [spec for _, spec in sorted(plan, key=lambda x: x[0])]   # stable: keeps the shape order within a tier
    if a.only:
        words = [w.strip() for w in a.only.split(",") if w.strip()]
        plan = [s for s in plan if any(w in s["name"] for w in words)]

    rows, failed = [], False
    for spec in plan:
        left = a.budget - (time.time() - t_start)
        need = 20 if spec["kind"] != "torch.compile" else 45
        if left < need:
            res = {"skipped": f"{left:.0f} s of the --budget left"}
        else:
            t0 = time.time()
            res = pipetrain_run(exe, spec, work, left) if spec["kind"] == "pipetrain" else torch_child(spec, work, left)
            res["wall_s"] = time.time() - t0
            failed |= "error" in res and spec["kind"] != "torch.compile"   # compile: "where it works"
            if spec["kind"] == "pipetrain" and res.get("model"):
                c = spec["cfg"]
                want = (c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"], c["vocab_size"])
                if res["model"][:4] != want:
                    res = {"error": f"pipetrain's preset {spec['shape']} is {res['model'][:4]}, this script's {want}"}
                    failed = True
        print(f"gpu_vs_torch: {spec['shape']} {spec['precision']} {spec['name']}: "
              f"{json.dumps({k: v for k, v in res.items() if k != 'model'})}", file=sys.stderr, flush=True)
        rows.append(dict(spec, res=res))

    gpu = "the CPU"
    if a.device == "cuda":   # from nvidia-smi: this process keeps no CUDA context of its own
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True) if shutil.which("nvidia-smi") else None
        gpu = smi.stdout.strip() if smi and smi.stdout.strip() else "the GPU"
    first = next((r["res"] for r in rows if r["kind"] != "pipetrain" and "torch" in r["res"]), {})
    header = (f"Training speed, pipetrain against PyTorch {torch.__version__} on {gpu}: batch {a.batch} × seq {a.seq}, "
              f"dropout 0.1, AdamW ({first.get('adamw', '?')} in PyTorch), clip 1.0; tok/s over {a.steps} steps after "
              f"{a.warmup} warm-up steps. PyTorch computes every position's logits (as Hugging Face does), attention "
              f"{first.get('attention', '?')}, fp32 with TF32 off; bf16 = autocast. pipetrain bf16 = --dtype bf16. "
              f"Ratios: the run's tok/s over PyTorch's for the same shape and precision. "
              f"Whole benchmark {time.time() - t_start:.0f} s (scripts/gpu_vs_torch.py).")
    print(table(rows, header))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
