#!/usr/bin/python3
"""pipetrain against the real Hugging Face `transformers`, both ways, and its tokenizers.

    python3 scripts/hf_interop.py [--pipetrain build/pipetrain] [--work DIR] [--selftest]

(a) pipetrain trains tiny models (2 stages) and saves them; transformers' from_pretrained loads
    each directory (ErnieForMaskedLM; a fine-tuned ErnieForSequenceClassification; a causal model
    as ErnieForCausalLM; an HF-made model with task ids after pipetrain fine-tuned it) and its
    outputs on a fixed batch must match `pipetrain eval --dump-logits` (logits, every hidden state,
    pooled output) within 1e-5 relative (max |Δ| / max |ref| over real tokens, fp32, CPU).
(b) transformers makes random ErnieForMaskedLM models, with and without use_task_id, and saves
    them with save_pretrained (safetensors) and as pytorch_model.bin (save_pretrained's own when
    the version still has safe_serialization=False, else torch.save(model.state_dict()), as the
    transformers 5 migration guide says), the .bin going through scripts/convert_checkpoint.py;
    `pipetrain eval` loads each and its outputs must match transformers'.
(c) The slow BertTokenizer (BertTokenizerLegacy in transformers 5) and the fast one, on a
    pipetrain vocab.txt, against `pipetrain tokenize --ids` on tests/fixtures/tokenizer/input.txt,
    id for id, except the lines listed in KNOWN with their reasons (an ERNIE-style "token<TAB>id"
    vocab line, Python's final-sigma lowercasing): any other line where the slow one differs
    fails; where the fast one differs the lines are listed (DIFF).
(d) What `pipetrain export --onnx` writes, read by Python's consumers (issue #32): onnxruntime (or,
    where it is missing, the ONNX project's ReferenceEvaluator; else SKIP) runs the exported graph of
    (a)'s three models, the ERNIE fixture nano-like and a random model over the tokenizer fixture's
    vocab on batches of 2 x 23 (8 x 23 from the classifier's dev TSV), logits within 1e-4 of `pipetrain
    eval --dump-logits`; AutoTokenizer loads a directory holding only the tokenizer.json (and its two
    companions) pipetrain exported for that vocab, id for id with `pipetrain tokenize --ids` on every
    fixture line, and frames three lines and three pairs as pipetrain does ([CLS] A [SEP] B [SEP],
    token types 0 then 1); and transformers' fill-mask pipeline on (a)'s MLM gives `pipetrain
    fill-mask`'s top 5 for 床前明[MASK]光, in order, with its scores.

Nothing is downloaded: every model and tokenizer comes from a local directory, with
local_files_only=True and HF_HUB_OFFLINE=1. Each check prints PASS / FAIL (or DIFF) with its
numbers on stderr; stdout gets a markdown section (scripts/gpu_check.sh appends it to
docs/gpu-results.md). Exit status: 0 when every check passed, 1 when one failed, 77 (and one
line) when transformers cannot be imported. --selftest runs the same checks with
scripts/gpu_vs_torch.py's plain PyTorch ERNIE in place of transformers (and the tokenizer
fixture's golden ids in place of its tokenizers, a numpy evaluator of our own in place of
onnxruntime), to test this script where transformers is missing: a PASS there says nothing about
transformers or onnxruntime. Without torch the selftest's model checks SKIP (ctest runs it so).
"""
import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile

for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[var] = "1"   # local directories only, whatever the machine's settings
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

try:
    import numpy as np
except ImportError:   # one line, like a missing torch or transformers
    print("hf_interop.py: skipped: needs numpy (this python: " + sys.executable + ")")
    sys.exit(77)

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(SCRIPTS)
sys.path.insert(0, SCRIPTS)
from gpu_vs_torch import build_peer_classes, find_pipetrain, fixed_batch, read_safetensors, write_safetensors  # noqa: E402

TOL = 1e-5
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


# ---- checks and their report ----------------------------------------------------------------

class Report:
    def __init__(self):
        self.rows, self.notes = [], []

    def add(self, part, name, status, detail):
        self.rows.append((part, name, status, detail))
        print(f"{status}: ({part}) {name}: {detail}", file=sys.stderr, flush=True)

    def failed(self):
        return any(r[2] == "FAIL" for r in self.rows)

    def markdown(self, title):
        out = [title, "", "| part | check | result | numbers |", "|---|---|---|---|"]
        out += [f"| {p} | {n} | {s} | {d.replace('|', '/')} |" for p, n, s, d in self.rows]
        for note in self.notes:
            out += ["", note]
        return "\n".join(out)


def rel_err(got, ref, mask=None):
    """max |got - ref| / max |ref|; for per-token tensors ([B, T, ...]) only where mask is 1."""
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise ValueError(f"shapes differ: {got.shape} vs {ref.shape}")
    if mask is not None:
        keep = np.asarray(mask).astype(bool)
        got, ref = got[keep], ref[keep]
    scale = np.abs(ref).max()
    return float(np.abs(got - ref).max() / scale) if scale > 0 else float(np.abs(got).max())


def compare_outputs(dump, ref, mask, kind):
    """[(name, rel error)] for the tensors both sides have: pipetrain's dump (eval --dump-logits)
    against the other implementation's outputs {logits, hidden_states, pooled_output}."""
    pairs = []
    logits = {"mlm": "mlm_logits", "causal": "causal_logits", "classify": "logits"}[kind]
    pairs.append((logits, rel_err(dump[logits], ref["logits"], mask if kind != "classify" else None)))
    last = "causal_last_hidden_state" if kind == "causal" else "last_hidden_state"
    if ref.get("hidden_states") is not None:
        pairs.append((last, rel_err(dump[last], ref["hidden_states"][-1], mask)))
        for i, h in enumerate(ref["hidden_states"]):
            if f"hidden_states.{i}" in dump:
                pairs.append((f"hidden_states.{i}", rel_err(dump[f"hidden_states.{i}"], h, mask)))
    if kind == "classify" and ref.get("pooled_output") is not None:
        pairs.append(("pooled_output", rel_err(dump["pooled_output"], ref["pooled_output"])))
    return pairs


def verdict(pairs, extra=""):
    worst = max(pairs, key=lambda p: p[1])
    status = "PASS" if worst[1] < TOL else "FAIL"
    first = pairs[0]
    detail = f"{first[0]} rel {first[1]:.2e}; worst of {len(pairs)} tensors {worst[0]} {worst[1]:.2e} (tol {TOL:g})"
    return status, detail + (f"; {extra}" if extra else "")


# ---- pipetrain ------------------------------------------------------------------------------

class Pipetrain:
    def __init__(self, exe, log):
        self.exe, self.log = exe, log

    def __call__(self, *args, timeout=300):
        """Runs pipetrain; returns (stdout, warnings). Raises RuntimeError with its last line on failure."""
        cmd = [self.exe] + [str(a) for a in args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        with open(self.log, "a") as f:
            f.write("$ " + " ".join(cmd) + f"\n{p.stdout}{p.stderr}[exit {p.returncode}]\n")
        if p.returncode != 0:
            raise RuntimeError(f"pipetrain {args[0]} exit {p.returncode}: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
        warnings = [l for l in p.stderr.splitlines() if l.startswith("warning:")]
        return p.stdout, warnings

    def dump(self, model_dir, work, name, inputs=None, data=None, seq=None, objective=None):
        out = os.path.join(work, f"dump-{name}.safetensors")
        args = ["eval", "--model", model_dir, "--dump-logits", out]
        args += ["--inputs", inputs] if inputs else ["--data", data, "--seq", seq]
        if objective:
            args += ["--objective", objective]
        _, warnings = self(*args)
        return read_safetensors(out), warnings


# ---- the two implementations pipetrain is compared with -------------------------------------

def hf_config_dict(cfg):
    """Hugging Face ErnieConfig keys for one of our shape dicts."""
    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
            "max_position_embeddings", "type_vocab_size", "task_type_vocab_size", "use_task_id", "layer_norm_eps")
    return dict({k: cfg[k] for k in keys}, pad_token_id=0, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


def redraw(torch, model, H, I, seed):
    """Random weights that make bugs visible (the ERNIE fixtures' recipe, tests/fixtures/ernie/README.md):
    N(0, 0.02) leaves attention uniform and GELU linear."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            n = lambda std: torch.randn(p.shape, generator=g) * std
            if "LayerNorm" in name and name.endswith("weight"):
                v = 1 + n(0.1)
            elif "LayerNorm" in name or name.endswith("bias"):
                v = n(0.1 if "LayerNorm" in name else 0.05)
            elif "embeddings" in name:
                v = n(0.1)
            elif ".query." in name or ".key." in name or "transform.dense" in name:
                v = n(1.5 / H ** 0.5)
            elif "output.dense" in name and "attention" not in name:
                v = n(3 / I ** 0.5)
            else:
                v = n(1 / H ** 0.5)
            p.copy_(v)


class HF:
    """The real transformers."""
    def __init__(self):
        import torch
        import transformers
        self.torch, self.tf, self.no_models = torch, transformers, None
        self.name = f"transformers {transformers.__version__}, torch {torch.__version__}"
        torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))

    def random_mlm(self, cfg, seed):
        self.torch.manual_seed(seed)
        model = self.tf.ErnieForMaskedLM(self.tf.ErnieConfig(**hf_config_dict(cfg))).eval()
        redraw(self.torch, model, cfg["hidden_size"], cfg["intermediate_size"], seed)
        return model

    def save(self, model, directory, fmt):
        """fmt: safetensors or bin. Returns how it was written."""
        if fmt == "safetensors":
            model.save_pretrained(directory)   # safetensors is the default since 4.35, the only format in 5
            if not os.path.exists(os.path.join(directory, "model.safetensors")):
                raise RuntimeError(f"save_pretrained wrote no model.safetensors: {sorted(os.listdir(directory))}")
            return "save_pretrained"
        how = "save_pretrained(safe_serialization=False)"
        try:
            model.save_pretrained(directory, safe_serialization=False)
        except TypeError:
            pass
        if not os.path.exists(os.path.join(directory, "pytorch_model.bin")):
            # transformers 5 writes safetensors whatever the flag (5.17 accepts and ignores it): "save
            # the model.state_dict() by yourself", as its migration guide says.
            for f in os.listdir(directory) if os.path.isdir(directory) else []:
                if f.endswith(".safetensors"): os.remove(os.path.join(directory, f))
            os.makedirs(directory, exist_ok=True)
            model.config.save_pretrained(directory)
            self.torch.save(model.state_dict(), os.path.join(directory, "pytorch_model.bin"))
            how = "torch.save(state_dict) (this transformers writes no .bin with save_pretrained)"
        if not os.path.exists(os.path.join(directory, "pytorch_model.bin")):
            raise RuntimeError(f"no pytorch_model.bin written: {sorted(os.listdir(directory))}")
        return how

    def load(self, kind, directory, attn=None):
        """(model, problems): problems lists keys from_pretrained did not load or did not use."""
        cls = {"mlm": self.tf.ErnieForMaskedLM, "classify": self.tf.ErnieForSequenceClassification,
               "causal": self.tf.ErnieForCausalLM}[kind]
        kw = dict(local_files_only=True, output_loading_info=True)
        if attn:
            kw["attn_implementation"] = attn
        try:
            model, info = cls.from_pretrained(directory, dtype=self.torch.float32, **kw)
        except TypeError:   # before 4.56 the argument was torch_dtype
            model, info = cls.from_pretrained(directory, torch_dtype=self.torch.float32, **kw)
        model = model.float().eval()
        if not isinstance(info, dict):
            info = dict(vars(info)) if hasattr(info, "__dict__") else {}
        problems = []
        for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
            for k in info.get(key, []) or []:
                name = k if isinstance(k, str) else str(k[0] if isinstance(k, (list, tuple)) else k)
                if key == "missing_keys" and name.startswith("cls.predictions.decoder."):
                    continue   # tied to the word embedding / cls.predictions.bias
                if key == "unexpected_keys" and name.startswith("ernie.pooler.") and kind != "classify":
                    continue   # pipetrain keeps the pooler; ErnieForMaskedLM has none
                if key == "unexpected_keys" and name.startswith("cls.") and kind == "classify":
                    continue   # the MLM head a classifier was fine-tuned from
                problems.append(f"{key}: {name}")
        return model, problems

    def forward(self, model, batch, task_ids=True):
        t = lambda k: self.torch.from_numpy(np.array(batch[k]))
        kw = dict(input_ids=t("input_ids"), attention_mask=t("attention_mask"), token_type_ids=t("token_type_ids"))
        if task_ids and "task_type_ids" in batch and getattr(model.config, "use_task_id", False):
            kw["task_type_ids"] = t("task_type_ids")
        with self.torch.no_grad():
            out = model(**kw, output_hidden_states=True)   # a ModelOutput (return_dict is the default)
            res = {"logits": out.logits.numpy(), "hidden_states": [h.numpy() for h in out.hidden_states]}
            if hasattr(model, "ernie") and getattr(model.ernie, "pooler", None) is not None:
                res["pooled_output"] = model.ernie(**kw).pooler_output.numpy()
        return res

    def tokenizers(self, vocab, work):
        """[(label, encode(list of lines) -> list of id lists, how it was made)]; raises if none."""
        d = os.path.join(work, "tok-" + os.path.basename(os.path.dirname(vocab)))
        os.makedirs(d, exist_ok=True)
        shutil.copy(vocab, os.path.join(d, "vocab.txt"))
        lines = open(vocab, encoding="utf-8").read().split("\n")
        lines = lines[:-1] if lines and lines[-1] == "" else lines
        unk = max(i for i, l in enumerate(lines) if l == "[UNK]")
        opts = dict(do_lower_case=True, tokenize_chinese_chars=True, strip_accents=None)
        slow = getattr(self.tf, "BertTokenizerLegacy", None)   # transformers 5: BertTokenizer is the fast one
        slow_cls = [("BertTokenizerLegacy", slow)] if slow else [("BertTokenizer", self.tf.BertTokenizer)]
        fast_cls = [("BertTokenizerFast", getattr(self.tf, "BertTokenizerFast", None)), ("BertTokenizer", self.tf.BertTokenizer)]
        out = []
        for want_fast, classes in ((False, slow_cls), (True, fast_cls)):
            errors = []
            for cname, cls in classes:
                if cls is None:
                    continue
                for how, make in ((f"{cname}.from_pretrained(dir with vocab.txt)", lambda: cls.from_pretrained(d, local_files_only=True, **opts)),
                                  (f"{cname}(vocab_file=...)", lambda: cls(vocab_file=vocab, **opts)),
                                  (f"{cname}(vocab=dict)", lambda: cls(vocab={t: i for i, t in enumerate(lines)}, **opts))):
                    try:
                        tok = make()
                    except Exception as e:
                        errors.append(f"{how}: {type(e).__name__}: {e}"[:200])
                        continue
                    # A tokenizer that silently built its default vocabulary must not pass as ours.
                    if bool(getattr(tok, "is_fast", False)) != want_fast or tok.convert_tokens_to_ids("[UNK]") != unk \
                            or len(tok.get_vocab()) < len(set(lines)):
                        errors.append(f"{how}: is_fast {getattr(tok, 'is_fast', None)}, [UNK] = "
                                      f"{tok.convert_tokens_to_ids('[UNK]')} (want {unk}), {len(tok.get_vocab())} tokens")
                        continue
                    enc = lambda ls, tok=tok: [tok.encode(l, add_special_tokens=False) for l in ls]
                    out.append(("fast" if want_fast else "slow", enc, how))
                    break
                else:
                    continue
                break
            else:
                out.append(("fast" if want_fast else "slow", None, "; ".join(errors) or "no class"))
        return out


    def auto_tokenizer(self, directory):
        tok = self.tf.AutoTokenizer.from_pretrained(directory, local_files_only=True)
        if not getattr(tok, "is_fast", False):
            raise RuntimeError(f"AutoTokenizer made {type(tok).__name__}, not a fast tokenizer from tokenizer.json")
        return HFTokenizer(tok), f"AutoTokenizer → {type(tok).__name__}"

    def onnx_runner(self):
        return onnx_runner()

    def fill_mask(self, directory, text, tokenize):
        fm = self.tf.pipeline("fill-mask", model=directory, tokenizer=directory, device="cpu")
        return [(r["token_str"].strip(), float(r["score"])) for r in fm(text, top_k=5)], "transformers pipeline('fill-mask')"


class HFTokenizer:
    def __init__(self, tok):
        self.tok = tok

    def encode_lines(self, lines):
        return [self.tok.encode(l, add_special_tokens=False) for l in lines]

    def single(self, text):
        return self.tok(text)["input_ids"]

    def pair(self, a, b):
        e = self.tok(a, b)
        return e["input_ids"], e["token_type_ids"]


class StandIn:
    """scripts/gpu_vs_torch.py's plain PyTorch ERNIE with Hugging Face's names, in place of
    transformers, so that this script can be tested where transformers is missing."""
    def __init__(self):
        try:   # without torch the checks that run a model skip, and the rest still run (CI)
            import torch
        except ImportError:
            self.torch, self.no_models = None, "skipped: the stand-in model needs torch (Debian python3-torch)"
            self.name = "SELFTEST stand-in without torch (no model runs), not transformers"
            return
        self.torch, self.no_models = torch, None
        self.Model = build_peer_classes(torch)
        self.name = f"SELFTEST stand-in (plain PyTorch ERNIE of gpu_vs_torch.py, torch {torch.__version__}), not transformers"

    def random_mlm(self, cfg, seed):
        self.torch.manual_seed(seed)
        model = self.Model(dict(cfg, num_labels=0)).eval()
        redraw(self.torch, model, cfg["hidden_size"], cfg["intermediate_size"], seed)
        return model

    def save(self, model, directory, fmt):
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(dict(hf_config_dict(model.c), architectures=["ErnieForMaskedLM"], model_type="ernie"), f, indent=2)
        state = model.state_dict()
        if fmt == "safetensors":
            write_safetensors(os.path.join(directory, "model.safetensors"), {k: v.numpy() for k, v in state.items()})
            return "stand-in safetensors writer"
        # As HF's state_dict has them: the tied decoder, sharing the embedding's and the bias's storage.
        state["cls.predictions.decoder.weight"] = state["ernie.embeddings.word_embeddings.weight"]
        state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
        self.torch.save(state, os.path.join(directory, "pytorch_model.bin"))
        return "torch.save(state_dict)"

    def load(self, kind, directory, attn=None):
        c = json.load(open(os.path.join(directory, "config.json")))
        c["num_labels"] = len(c.get("id2label", {})) if kind == "classify" else 0
        c["is_decoder"] = kind == "causal"
        model = self.Model(c).eval()
        tensors = read_safetensors(os.path.join(directory, "model.safetensors"))
        state = {k: self.torch.from_numpy(np.array(v)) for k, v in tensors.items()
                 if not k.startswith("cls.predictions.decoder.") and not (k.startswith("ernie.pooler.") and kind != "classify")
                 and not (k.startswith("cls.") and kind == "classify")}
        missing, unexpected = model.load_state_dict(state, strict=False)
        return model, [f"missing_keys: {k}" for k in missing] + [f"unexpected_keys: {k}" for k in unexpected]

    def forward(self, model, batch, task_ids=True):
        t = lambda k: self.torch.from_numpy(np.array(batch[k]))
        tasks = t("task_type_ids") if task_ids and "task_type_ids" in batch and model.c["use_task_id"] else None
        with self.torch.no_grad():
            out = model(t("input_ids"), t("token_type_ids"), t("attention_mask").float(), tasks, hidden_states=True)
        res = {"logits": out["logits"].numpy(), "hidden_states": [h.numpy() for h in out["hidden_states"]]}
        if "pooled_output" in out:
            res["pooled_output"] = out["pooled_output"].numpy()
        return res

    def tokenizers(self, vocab, work):
        """The tokenizer fixture's golden ids (made by the reference slow tokenizer) for its vocab."""
        golden = os.path.join(os.path.dirname(vocab), "ids.txt")
        if not os.path.exists(golden):
            return []   # nothing to compare with
        ids = [[int(x) for x in l.split()] for l in read_lf_lines(golden)]
        return [("slow", lambda ls: ids[:len(ls)], "stand-in: tests/fixtures/tokenizer/ids.txt")]

    def auto_tokenizer(self, directory):
        return TemplateStandIn(os.path.join(directory, "tokenizer.json")), "stand-in: golden ids, tokenizer.json's templates"

    def onnx_runner(self):
        try:
            import onnx  # noqa: F401  (python3-onnx reads the file)
        except ImportError:
            return None
        return NumpyOnnx

    def fill_mask(self, directory, text, tokenize):
        """Top 5 of the stand-in model at the [MASK] of text, tokenized by `tokenize` (pipetrain's)."""
        words = read_lf_lines(os.path.join(directory, "vocab.txt"))
        ids = [words.index("[CLS]")] + tokenize(text) + [words.index("[SEP]")]
        at = ids.index(words.index("[MASK]"))
        model, _ = self.load("mlm", directory)
        n = len(ids)
        batch = {"input_ids": [ids], "token_type_ids": [[0] * n], "attention_mask": [[1] * n]}
        z = self.forward(model, batch)["logits"][0, at].astype(np.float64)
        p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        return [(words[i], float(p[i])) for i in np.argsort(-p, kind="stable")[:5]], "stand-in: its model's softmax"


class TemplateStandIn:
    """--selftest's tokenizer: the fixture's golden ids, framed by the templates read from tokenizer.json."""
    def __init__(self, path):
        j = json.load(open(path, encoding="utf-8"))
        self.post = j["post_processor"]
        text = read_lf_lines(os.path.join(FIXTURES, "tokenizer", "input.txt"))
        ids = read_lf_lines(os.path.join(FIXTURES, "tokenizer", "ids.txt"))
        self.golden = {t: [int(x) for x in i.split()] for t, i in zip(text, ids)}

    def encode_lines(self, lines):
        return [self.golden[l] for l in lines]

    def frame(self, template, seqs):
        ids, types = [], []
        for piece in template:
            (kind, v), = piece.items()
            got = self.post["special_tokens"][v["id"]]["ids"] if kind == "SpecialToken" else seqs[v["id"]]
            ids += got
            types += [v["type_id"]] * len(got)
        return ids, types

    def single(self, text):
        return self.frame(self.post["single"], {"A": self.golden[text]})[0]

    def pair(self, a, b):
        return self.frame(self.post["pair"], {"A": self.golden[a], "B": self.golden[b]})


# ---- (a) and (b): models ---------------------------------------------------------------------

SHAPES = {   # small random models: a head size of 26 (not a power of two, like ernie-3.0-nano), task ids or not
    "task": dict(vocab_size=512, hidden_size=52, num_hidden_layers=2, num_attention_heads=2, intermediate_size=208,
                 hidden_act="gelu", max_position_embeddings=64, type_vocab_size=4, task_type_vocab_size=16,
                 use_task_id=True, layer_norm_eps=1e-12),
    "no-task": dict(vocab_size=300, hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
                    hidden_act="gelu", max_position_embeddings=40, type_vocab_size=2, task_type_vocab_size=3,
                    use_task_id=False, layer_norm_eps=1e-5),
}


def config_of(directory):
    c = json.load(open(os.path.join(directory, "config.json")))
    c.setdefault("use_task_id", False)
    c.setdefault("task_type_vocab_size", 0)
    return c


def write_vocab(directory, V):
    words = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"] + [f"[unused{i}]" for i in range(5, V)]
    with open(os.path.join(directory, "vocab.txt"), "w") as f:
        f.write("\n".join(words[:V]) + "\n")


def check_model(report, part, name, impl, pt, kind, model_dir, work, batch_file=None, data=None, seq=None):
    """pipetrain's dump of model_dir against impl loading the same directory."""
    if impl.no_models:
        return report.add(part, name, "SKIP", impl.no_models)
    dump, warnings = pt.dump(model_dir, work, name.replace(" ", "_"), inputs=batch_file, data=data, seq=seq,
                             objective="causal" if kind == "causal" else None)
    batch = {k: dump[k] for k in ("input_ids", "token_type_ids", "attention_mask", "task_type_ids") if k in dump}
    model, problems = impl.load(kind, model_dir)
    pairs = compare_outputs(dump, impl.forward(model, batch), batch["attention_mask"], kind)
    extra = []
    if kind == "mlm" and "labels" in (read_safetensors(batch_file) if batch_file else {}):
        labels = read_safetensors(batch_file)["labels"]
        logits = impl.forward(model, batch)["logits"]
        lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
        keep = labels != -100
        ref_loss = float((lse[keep] - np.take_along_axis(logits, np.where(keep, labels, 0)[..., None], -1)[..., 0][keep]).mean())
        extra.append(f"loss {float(dump['mlm_loss'][0]):.6f} vs {ref_loss:.6f}")
    if isinstance(impl, HF):   # the default attention (SDPA) and the eager one
        try:
            eager, _ = impl.load(kind, model_dir, attn="eager")
            worst = max(p[1] for p in compare_outputs(dump, impl.forward(eager, batch), batch["attention_mask"], kind))
            pairs.append(("eager attention, worst", worst))
            extra.append(f"attention {getattr(model.config, '_attn_implementation', '?')} and eager")
        except Exception as e:
            extra.append(f"eager n/a ({type(e).__name__})")
    status, detail = verdict(pairs, "; ".join(extra))
    if problems or warnings:
        status = "FAIL" if problems else status
        detail += "; " + "; ".join(problems + warnings)[:400]
    report.add(part, name, status, detail)
    return batch


def attempt(report, part, name, fn):
    """fn() reports its own result; an exception becomes a FAIL row of its own, the next check still runs."""
    try:
        return fn()
    except Exception as e:
        report.add(part, name, "FAIL", f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
        return None


def part_a(report, impl, pt, work, trained_vocab_holder):
    sample = os.path.join(FIXTURES, "text", "sample_zh.txt")
    dev = os.path.join(FIXTURES, "classify", "dev.tsv")
    # --overwrite: a rerun with the same --work trains into the directories of the last one
    common = ["--stages", 2, "--micro-batches", 2, "--batch", 8, "--seq", 32, "--seed", 1, "--overwrite"]
    mlm, cls_dir, causal = (os.path.join(work, d) for d in ("a-mlm", "a-classifier", "a-causal"))

    def a1():   # masked LM trained by pipetrain through 2 stages
        pt("train", "--preset", "tiny", "--data", sample, "--out", mlm, "--steps", 20, *common)
        trained_vocab_holder.append(os.path.join(mlm, "vocab.txt"))
        batch_file = os.path.join(work, "batch-a.safetensors")
        write_safetensors(batch_file, fixed_batch(config_of(mlm), 4, 32, seed=2, padded=True))
        check_model(report, "a", name1, impl, pt, "mlm", mlm, work, batch_file=batch_file)
        return True

    def a2():   # a classifier fine-tuned from it, evaluated on the dev TSV (the dump carries the batch)
        pt("train", "--model", mlm, "--task", "classify", "--labels", 2, "--data",
           os.path.join(FIXTURES, "classify", "train.tsv"), "--eval", dev, "--out", cls_dir, "--steps", 10, "--lr", "1e-3", *common)
        check_model(report, "a", name2, impl, pt, "classify", cls_dir, work, data=dev, seq=32)

    def a3():   # a causal model (config.json says is_decoder) → ErnieForCausalLM
        pt("train", "--preset", "tiny", "--data", sample, "--objective", "causal", "--out", causal, "--steps", 10, *common)
        batch_file = os.path.join(work, "batch-a3.safetensors")
        write_safetensors(batch_file, fixed_batch(config_of(causal), 4, 32, seed=3, padded=True))
        check_model(report, "a", name3, impl, pt, "causal", causal, work, batch_file=batch_file)

    name1 = "pipetrain-trained MLM (tiny, 2 stages) → ErnieForMaskedLM.from_pretrained"
    name2 = "pipetrain fine-tuned classifier → ErnieForSequenceClassification.from_pretrained"
    name3 = "pipetrain-trained causal model → ErnieForCausalLM.from_pretrained"
    if attempt(report, "a", name1, a1) and os.path.exists(os.path.join(mlm, "config.json")):
        attempt(report, "a", name2, a2)
    else:
        report.add("a", name2, "FAIL", "not run: the MLM it is fine-tuned from was not made")
    attempt(report, "a", name3, a3)


def part_b(report, impl, pt, work):
    """Random models made by the other side, in both formats; then (a4) pipetrain fine-tunes one
    with task ids and the other side loads the result."""
    tuned_from = None
    if impl.no_models:
        return report.add("b", "random models made by the other side", "SKIP", impl.no_models)
    for shape, cfg in SHAPES.items():
        model = impl.random_mlm(cfg, seed=7 if shape == "task" else 8)
        batch_file = os.path.join(work, f"batch-b-{shape}.safetensors")
        write_safetensors(batch_file, fixed_batch(cfg, 3, 16, seed=4, padded=True))
        for fmt in ("safetensors", "bin"):
            d = os.path.join(work, f"b-{shape}-{fmt}")
            shutil.rmtree(d, ignore_errors=True)
            name = f"random ErnieForMaskedLM ({'use_task_id' if cfg['use_task_id'] else 'no task ids'}), {fmt}"
            try:
                how = impl.save(model, d, fmt)
                write_vocab(d, cfg["vocab_size"])
                if fmt == "bin":
                    p = subprocess.run([sys.executable, os.path.join(SCRIPTS, "convert_checkpoint.py"),
                                        os.path.join(d, "pytorch_model.bin"), os.path.join(d, "model.safetensors")],
                                       capture_output=True, text=True, timeout=120)
                    if p.returncode != 0:
                        raise RuntimeError(f"convert_checkpoint.py: {p.stderr.strip()}")
                    how += " → convert_checkpoint.py"
                dump, warnings = pt.dump(d, work, f"b-{shape}-{fmt}", inputs=batch_file)
                batch = read_safetensors(batch_file)
                ref = impl.forward(model, batch)
                status, detail = verdict(compare_outputs(dump, ref, batch["attention_mask"], "mlm"), how)
                if warnings:
                    detail += "; " + "; ".join(warnings)[:300]
                report.add("b", name + " → pipetrain eval", status, detail)
                if cfg["use_task_id"] and fmt == "safetensors":
                    tuned_from = (d, batch_file)
                    # No task ids in the input: both sides must take task 0 for every token.
                    plain = os.path.join(work, "batch-b-no-task-ids.safetensors")
                    write_safetensors(plain, {k: v for k, v in batch.items() if k != "task_type_ids"})
                    dump2, _ = pt.dump(d, work, "b-task-ids-absent", inputs=plain)
                    status, detail = verdict(compare_outputs(dump2, impl.forward(model, batch, task_ids=False),
                                                             batch["attention_mask"], "mlm"))
                    report.add("b", name + ", inputs without task_type_ids (= task 0)", status, detail)
            except Exception as e:
                report.add("b", name, "FAIL", f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
    if tuned_from:
        d, batch_file = tuned_from
        out = os.path.join(work, "a4-finetuned")
        try:
            pt("train", "--model", d, "--inputs", batch_file, "--out", out, "--stages", 2, "--micro-batches", 1,
               "--steps", 5, "--lr", "1e-3", "--seed", 1, "--overwrite")
            check_model(report, "a", "HF-made model with task ids, fine-tuned by pipetrain (2 stages) → ErnieForMaskedLM",
                        impl, pt, "mlm", out, work, batch_file=batch_file)
        except Exception as e:
            report.add("a", "HF-made model with task ids, fine-tuned by pipetrain", "FAIL", f"{type(e).__name__}: {e}"[:300])


# ---- (c): tokenizers ------------------------------------------------------------------------

def read_lf_lines(path):
    """Lines split on LF only, as pipetrain reads them (CR, FF, U+2028 … belong to their line)."""
    text = open(path, "rb").read().decode("utf-8")
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def diff_lines(lines, ours, theirs):
    """[(line number, text, our ids, their ids)] where the two id lists differ."""
    if len(ours) != len(lines) or len(theirs) != len(lines):
        raise ValueError(f"{len(lines)} input lines, {len(ours)} from pipetrain, {len(theirs)} from the other")
    return [(i + 1, lines[i], ours[i], theirs[i]) for i in range(len(lines)) if ours[i] != theirs[i]]


def shown(text, limit=60):
    """The line for a markdown cell: control, format and separator characters (and |, `) escaped."""
    import unicodedata
    out = "".join(c if unicodedata.category(c)[0] not in "CZ" or c == " " else f"\\u{ord(c):04x}" for c in text[:limit])
    return out.replace("|", "\\|").replace("`", "\\`") + ("…" if len(text) > limit else "")


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def ids_from(ids, k, count=8):
    part = " ".join(map(str, ids[k:k + count])) or "(end)"
    return ("… " if k else "") + part + (" …" if len(ids) > k + count else "")


# Lines of tests/fixtures/tokenizer/input.txt where transformers is known to differ from pipetrain,
# and why (seen with transformers 5.17 on 2026-12-04). Any other difference fails (slow) or is
# listed as DIFF (fast).
FIXTURE_VOCAB = "tests/fixtures/tokenizer/vocab.txt"
_TAB_LINE = ("the fixture's vocab.txt has the line 'model<TAB>121', ERNIE's own 'token<TAB>id' form, which "
             "pipetrain (as Paddle's ERNIE tokenizer) reads as the token 'model'; transformers' load_vocab keeps "
             "the whole line as one token, so 'model' becomes m ##o ##d ##e ##l")
KNOWN = {
    (FIXTURE_VOCAB, "slow", 89): _TAB_LINE,
    (FIXTURE_VOCAB, "fast", 89): _TAB_LINE,
    (FIXTURE_VOCAB, "slow", 105): "Python's str.lower() applies Unicode's final-sigma rule (a word-final Σ becomes ς); "
                                  "pipetrain and the fast (Rust) tokenizer lower each character alone (Σ becomes σ)",
}


def part_c(report, impl, pt, work, vocabs):
    text = os.path.join(FIXTURES, "tokenizer", "input.txt")
    lines = read_lf_lines(text)
    for label, vocab in vocabs:
        out, _ = pt("tokenize", "--vocab", vocab, "--ids", "--file", text)
        ours = [[int(x) for x in l.split()] for l in out.split("\n")[:len(lines)]]
        if len(out.split("\n")) != len(lines) + 1:
            report.add("c", f"pipetrain tokenize ({label})", "FAIL", f"{len(out.splitlines())} output lines for {len(lines)}")
            continue
        for kind, encode, how in impl.tokenizers(vocab, work):
            name = f"{kind} tokenizer vs pipetrain tokenize, {label}"
            if encode is None:
                report.add("c", name, "FAIL", f"could not make it: {how}"[:400])
                continue
            diffs = diff_lines(lines, ours, encode(lines))
            known = [d for d in diffs if KNOWN.get((label, kind, d[0]))]
            diffs = [d for d in diffs if d not in known]
            for n, t, a, b in known:
                report.notes.append(f"Known departure, line {n} ({shown(t)}), {kind} tokenizer on {label}: "
                                    f"{KNOWN[(label, kind, n)]}.")
            if not diffs:
                report.add("c", name, "PASS", f"{len(lines) - len(known)} lines id for id, {len(known)} known departures "
                           f"(listed below) ({how})")
                continue
            status = "FAIL" if kind == "slow" else "DIFF"
            report.add("c", name, status, f"{len(diffs)} of {len(lines)} lines differ beyond the {len(known)} known, "
                       f"first: line {diffs[0][0]} ({how})")
            rows = [f"| {n} | {shown(t)} | {k} | {ids_from(a, k)} | {ids_from(b, k)} |"
                    for n, t, a, b in diffs[:30] for k in [first_difference(a, b)]]
            report.notes.append(f"Lines where the {kind} tokenizer ({how}) differs from pipetrain on {label} "
                                f"({len(diffs)} lines{', first 30' if len(diffs) > 30 else ''}):\n\n"
                                "| line | text (invisible characters as \\u escapes) | first differing token | pipetrain ids from there | "
                                "transformers ids from there |\n|---:|---|---:|---|---|\n"
                                + "\n".join(rows))


# ---- (d): what pipetrain exports, read by Python's own consumers ------------------------------

class NumpyOnnx:
    """The exported graph run by numpy, op by op (the ~20 ops `pipetrain export --onnx` writes): the
    stand-in for onnxruntime in --selftest, so the plumbing of (d) is tested here; it is ours, so
    a PASS with it says nothing about onnxruntime."""
    name = "SELFTEST stand-in (numpy, this script's own evaluator), not onnxruntime"

    def __init__(self, path):
        import onnx
        from onnx import numpy_helper
        self.model = onnx.load(path)
        self.values = {t.name: numpy_helper.to_array(t) for t in self.model.graph.initializer}
        self.attrs = lambda n: {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}

    def run(self, feeds):
        from math import erf
        v = dict(self.values, **feeds)
        perf = np.vectorize(erf, otypes=[np.float32])
        for n in self.model.graph.node:
            x, a = [v[i] if i else None for i in n.input], self.attrs(n)
            op = n.op_type
            if op in ("Add", "Sub", "Mul", "Div"):
                y = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op](x[0], x[1])
            elif op == "MatMul":
                y = np.matmul(x[0], x[1])
            elif op == "Gather":
                y = np.take(x[0], x[1], axis=a.get("axis", 0))
            elif op == "Shape":
                y = np.array(x[0].shape, dtype=np.int64)
            elif op == "Range":
                y = np.arange(x[0], x[1], x[2], dtype=np.int64)
            elif op == "Cast":
                y = x[0].astype(np.float32)
            elif op == "Unsqueeze":
                y = np.expand_dims(x[0], tuple(int(i) for i in x[1]))
            elif op == "Concat":
                y = np.concatenate(x, axis=a["axis"])
            elif op == "Slice":
                y = x[0][int(x[1][0]):int(x[2][0])]
            elif op == "Expand":
                y = x[0] * np.ones(tuple(int(i) for i in x[1]), dtype=x[0].dtype)
            elif op == "Trilu":
                y = np.triu(x[0], int(x[1])) if a.get("upper", 1) else np.tril(x[0], int(x[1]))
            elif op == "Reshape":
                y = x[0].reshape([x[0].shape[i] if d == 0 else int(d) for i, d in enumerate(x[1])])
            elif op == "Transpose":
                y = np.transpose(x[0], a["perm"])
            elif op == "Softmax":
                e = np.exp(x[0] - x[0].max(axis=a["axis"], keepdims=True))
                y = e / e.sum(axis=a["axis"], keepdims=True)
            elif op == "LayerNormalization":
                mu = x[0].mean(-1, keepdims=True)
                y = (x[0] - mu) / np.sqrt(((x[0] - mu) ** 2).mean(-1, keepdims=True) + a["epsilon"]) * x[1] + x[2]
            elif op in ("Erf", "Tanh", "Relu"):
                y = perf(x[0]) if op == "Erf" else np.tanh(x[0]) if op == "Tanh" else np.maximum(x[0], 0)
            else:
                raise ValueError(f"NumpyOnnx: no {op} (node {n.name})")
            y = np.asarray(y)
            v[n.output[0]] = y.astype(np.float32) if y.dtype.kind == "f" else y
        return [v[o.name] for o in self.model.graph.output]


def onnx_runner():
    """(make(path) -> object with run(feeds) -> [outputs], name) for the first Python ONNX runtime that
    imports: onnxruntime, then ONNX's own reference evaluator (onnx >= 1.13); None if neither does."""
    try:
        import onnxruntime as ort

        class Ort:
            name = f"onnxruntime {ort.__version__} (Python, CPUExecutionProvider)"

            def __init__(self, path):
                self.s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])

            def run(self, feeds):
                return self.s.run(None, feeds)
        return Ort
    except ImportError:
        pass
    try:
        import onnx
        from onnx.reference import ReferenceEvaluator

        class Ref:
            name = f"onnx {onnx.__version__} ReferenceEvaluator (the ONNX project's Python reference runtime)"

            def __init__(self, path):
                self.s = ReferenceEvaluator(path)

            def run(self, feeds):
                return self.s.run(None, feeds)
        return Ref
    except ImportError:
        return None


def check_onnx(report, impl, pt, work, name, model_dir, kind, batch_file=None, data=None):
    """`pipetrain export --onnx` of model_dir run by impl's ONNX runtime on a batch of 2 x 23 (8 x 23 for a
    classifier's dev TSV) no other check uses, against `pipetrain eval --dump-logits` on the same batch."""
    runner = impl.onnx_runner()
    if runner is None:
        report.add("d", name, "SKIP", "neither onnxruntime nor onnx.reference imports in this python")
        return
    out = os.path.join(work, "d-onnx-" + os.path.basename(model_dir))
    shutil.rmtree(out, ignore_errors=True)   # a rerun with the same --work
    pt("export", "--model", model_dir, "--onnx", "--out", out, "--task-type", 0)
    dump, _ = pt.dump(model_dir, work, "d-" + os.path.basename(model_dir), inputs=batch_file, data=data,
                      seq=23 if data else None, objective="causal" if kind == "causal" else None)
    feeds = {k: np.ascontiguousarray(dump[k]).astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
    logits = runner(os.path.join(out, "onnx", "model.onnx")).run(feeds)[0]
    key = {"mlm": "mlm_logits", "causal": "causal_logits", "classify": "logits"}[kind]
    err = rel_err(logits, dump[key], feeds["attention_mask"] if kind != "classify" else None)
    report.add("d", name, "PASS" if err < ONNX_TOL else "FAIL",
               f"logits {tuple(logits.shape)} rel {err:.2e} (tol {ONNX_TOL:g}); {runner.name}")


ONNX_TOL = 1e-4   # #32's bound for the exported graph (its products in another order than pipetrain's)


def check_tokenizer_json(report, impl, pt, work, vocab_dir):
    """AutoTokenizer on a directory holding only the three tokenizer files pipetrain wrote (no vocab.txt),
    against `pipetrain tokenize --ids` on the fixture lines, and its [CLS] … [SEP] and pair templates."""
    d = os.path.join(work, "d-tokenizer-json-only")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(vocab_dir, f), d)
    text = os.path.join(FIXTURES, "tokenizer", "input.txt")
    lines = read_lf_lines(text)
    out, _ = pt("tokenize", "--vocab", os.path.join(FIXTURES, "tokenizer", "vocab.txt"), "--ids", "--file", text)
    ours = [[int(x) for x in l.split()] for l in out.split("\n")[:len(lines)]]
    tok, how = impl.auto_tokenizer(d)
    diffs = diff_lines(lines, ours, tok.encode_lines(lines))
    name = "AutoTokenizer on pipetrain's tokenizer.json alone (fixture vocab) vs pipetrain tokenize"
    detail = f"{len(lines) - len(diffs)} of {len(lines)} lines id for id ({how})"
    if diffs:
        n, t, a, b = diffs[0]
        k = first_difference(a, b)
        detail += f"; first: line {n} ({shown(t)}), pipetrain {ids_from(a, k)}, theirs {ids_from(b, k)}"
    report.add("d", name, "FAIL" if diffs else "PASS", detail)
    cls, sep = ours_special(os.path.join(FIXTURES, "tokenizer", "vocab.txt"))
    bad = []
    for i in range(0, 6, 2):   # three pairs of fixture lines: single and pair templates, token types
        a, b = ours[i], ours[i + 1]
        single, (pair, types) = tok.single(lines[i]), tok.pair(lines[i], lines[i + 1])
        if single != [cls] + a + [sep]:
            bad.append(f"line {i + 1} with specials: {ids_from(single, 0)}")
        if pair != [cls] + a + [sep] + b + [sep] or types != [0] * (len(a) + 2) + [1] * (len(b) + 1):
            bad.append(f"lines {i + 1}-{i + 2} as a pair: {ids_from(pair, 0)} / types {ids_from(types, 0)}")
    report.add("d", "its templates: [CLS] A [SEP] and [CLS] A [SEP] B [SEP] with token types 0 then 1",
               "FAIL" if bad else "PASS", "; ".join(bad)[:400] or f"3 single lines and 3 pairs as pipetrain frames them ({how})")


def ours_special(vocab):
    lines = read_lf_lines(vocab)
    return lines.index("[CLS]"), lines.index("[SEP]")


def check_fill_mask(report, impl, pt, model_dir):
    """The fill-mask of the Python side on pipetrain's MLM directory: the same top 5, in order, as
    `pipetrain fill-mask` (its scores printed to 4 decimals)."""
    text = "床前明[MASK]光"
    out, _ = pt("fill-mask", "--model", model_dir, text)
    fields = out.split(":", 1)[1].split()
    ours = [(fields[i], float(fields[i + 1])) for i in range(0, 10, 2)]
    vocab = os.path.join(model_dir, "vocab.txt")
    theirs, how = impl.fill_mask(model_dir, text, lambda t: [int(x) for x in pt("tokenize", "--vocab", vocab, "--ids", t)[0].split()])
    # In order, and each score within rounding of pipetrain's 4 decimals; two tokens whose scores
    # are that close may come in either order.
    close = lambda i: any(abs(ours[i][1] - ours[j][1]) < 1e-4 and theirs[i][0] == ours[j][0] for j in range(5))
    same = len(theirs) == 5 and all(theirs[i][0] == ours[i][0] or close(i) for i in range(5)) and \
        all(abs(s - dict(ours).get(t, -1)) <= 6e-5 for t, s in theirs)
    detail = "pipetrain " + " ".join(f"{t} {s:.4f}" for t, s in ours) + " | theirs " + " ".join(f"{t} {s:.4f}" for t, s in theirs)
    report.add("d", f"fill-mask on pipetrain's MLM, {text}: the same top 5 and scores", "PASS" if same else "FAIL", f"{detail} ({how})")


def d_batch(work, name, cfg, seed):
    """A padded batch of 2 x 23 for cfg, without task ids (the exported graph has task 0 baked in)."""
    path = os.path.join(work, f"batch-d-{name}.safetensors")
    write_safetensors(path, {k: v for k, v in fixed_batch(cfg, 2, 23, seed=seed, padded=True).items() if k != "task_type_ids"})
    return path


def part_d(report, impl, pt, work):
    mlm, cls_dir, causal = (os.path.join(work, d) for d in ("a-mlm", "a-classifier", "a-causal"))
    nano = os.path.join(FIXTURES, "ernie", "nano-like", "hf")
    dev = os.path.join(FIXTURES, "classify", "dev.tsv")
    models = [("pipetrain's MLM (a)", mlm, "mlm", 11), ("pipetrain's classifier (a), the dev TSV", cls_dir, "classify", None),
              ("pipetrain's causal model (a)", causal, "causal", 11),
              ("the ERNIE fixture nano-like (a real ERNIE configuration, task ids)", nano, "mlm", 12)]
    for name, model_dir, kind, seed in models:
        name = "export --onnx, " + name
        attempt(report, "d", name, lambda: check_onnx(
            report, impl, pt, work, name, model_dir, kind,
            d_batch(work, os.path.basename(model_dir), config_of(model_dir), seed) if seed else None, None if seed else dev))
    if impl.no_models:
        return report.add("d", "AutoTokenizer and fill-mask", "SKIP", impl.no_models)
    # A random model (the other side's) over the tokenizer fixture's vocabulary: its export holds the
    # tokenizer.json pipetrain writes for that vocabulary.
    fixture_vocab = os.path.join(FIXTURES, "tokenizer", "vocab.txt")
    vocab_model = os.path.join(work, "d-fixture-vocab")
    shutil.rmtree(vocab_model, ignore_errors=True)
    cfg = dict(SHAPES["no-task"], vocab_size=len(read_lf_lines(fixture_vocab)))
    impl.save(impl.random_mlm(cfg, seed=9), vocab_model, "safetensors")
    shutil.copy(fixture_vocab, os.path.join(vocab_model, "vocab.txt"))
    vocab_batch = d_batch(work, "fixture-vocab", cfg, 13)
    name = "export --onnx, a random model over the tokenizer fixture's vocab"
    attempt(report, "d", name, lambda: check_onnx(report, impl, pt, work, name, vocab_model, "mlm", vocab_batch))
    attempt(report, "d", "AutoTokenizer on tokenizer.json", lambda: check_tokenizer_json(
        report, impl, pt, work, os.path.join(work, "d-onnx-" + os.path.basename(vocab_model))))
    attempt(report, "d", "fill-mask", lambda: check_fill_mask(report, impl, pt, mlm))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipetrain", help="the pipetrain binary (default: build*/pipetrain)")
    ap.add_argument("--work", help="keep the models, dumps and pipetrain.log here (default: a temporary directory)")
    ap.add_argument("--selftest", action="store_true", help="test this script with a stand-in for transformers")
    a = ap.parse_args()
    try:
        impl = StandIn() if a.selftest else HF()
    except ImportError as e:
        print(f"hf_interop.py: skipped: cannot import {e.name} ({e}); run it where `import transformers` works")
        return 77
    exe = a.pipetrain or find_pipetrain(ROOT)
    if not exe or not os.access(exe, os.X_OK):
        print("hf_interop.py: no pipetrain binary (build it, or give --pipetrain)", file=sys.stderr)
        return 2
    work = a.work or tempfile.mkdtemp(prefix="hf_interop.")
    os.makedirs(work, exist_ok=True)
    pt = Pipetrain(os.path.abspath(exe), os.path.join(work, "pipetrain.log"))
    report, trained_vocab = Report(), []
    for part, fn in (("a", lambda: part_a(report, impl, pt, work, trained_vocab)), ("b", lambda: part_b(report, impl, pt, work))):
        try:
            fn()
        except Exception as e:   # one failed step must not hide the others' results
            report.add(part, "setup", "FAIL", f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
    vocabs = [("tests/fixtures/tokenizer/vocab.txt", os.path.join(FIXTURES, "tokenizer", "vocab.txt"))]
    vocabs += [("the vocab.txt pipetrain built for (a)", v) for v in trained_vocab]
    for part, fn in (("c", lambda: part_c(report, impl, pt, work, vocabs)), ("d", lambda: part_d(report, impl, pt, work))):
        try:
            fn()
        except Exception as e:
            report.add(part, "setup", "FAIL", f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    n_pass, n_skip = (sum(r[2] == x for r in report.rows) for x in ("PASS", "SKIP"))
    skipped = f" ({n_skip} skipped, their rows say why)" if n_skip else ""
    title = (f"### Interop with Hugging Face: {impl.name} ({when}, scripts/hf_interop.py)\n\n"
             f"{n_pass} of {len(report.rows)} checks passed{skipped}; logits and hidden states compared as max |Δ| / max |ref| "
             f"over real tokens, fp32 on the CPU, tolerance {TOL:g}.")
    if a.work or report.failed():
        print(f"hf_interop.py: models, dumps and pipetrain.log in {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)   # a temporary directory, and every check passed
    print(report.markdown(title))
    return 1 if report.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
