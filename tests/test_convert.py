#!/usr/bin/python3
"""Tests of scripts/convert_checkpoint.py. Run: /usr/bin/python3 tests/test_convert.py

Converts the ERNIE fixtures' .pdparams and the generated pickles of tests/fixtures/convert
(scripts/make_pdparams_fixtures.py), reads each output with the small strict reader below
(independent of the converter) and compares it bit for bit with the fixture's own
safetensors file or with the arrays the generator started from. Bad input must give one
line on stderr, exit status 1, no traceback and no file. The last line is "N passed, N failed".
"""
import glob
import json
import os
import pickle
import pickletools
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zipfile

try:
    import numpy as np
except ImportError:  # a pyenv or venv python without it: say how to get it, not a traceback
    sys.exit("tests/test_convert.py: needs numpy: sudo apt-get install python3-numpy, then run it as tests/test_convert.py (its shebang is /usr/bin/python3, Debian's python)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONVERTER = os.path.join(ROOT, "scripts", "convert_checkpoint.py")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
GENERATED = os.path.join(FIXTURES, "convert")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import convert_checkpoint  # noqa: E402  (for its writer only)
import make_pdparams_fixtures  # noqa: E402

ST_NUMPY = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I8": "i1",
            "U8": "u1", "BOOL": "?"}
ST_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32",
            "U32", "F32", "F64", "I64", "U64"]  # the Rust enum of the official writer

passed, failed = 0, 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def require(ok, message):
    if not ok:
        raise ValueError(message)


def read_safetensors(path):
    """(metadata, {name: array}, [names in file order]); raises on any layout error,
    including the official writer's conventions (space padding to 8, dtype-then-name order)."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    raw = data[8:8 + n]
    require(8 + n <= len(data) and (8 + n) % 8 == 0, f"header length {n} is not padded to 8")
    require(raw.rstrip(b" ").endswith(b"}") and raw.lstrip().startswith(b"{"), "header padding is not spaces")
    pairs = json.loads(raw, object_pairs_hook=lambda kv: kv)
    names = [k for k, _ in pairs if k != "__metadata__"]
    require(len(set(k for k, _ in pairs)) == len(pairs), "duplicate keys")
    header = dict(pairs)
    meta, tensors, offset = dict(header.get("__metadata__", [])), {}, 0
    for name in names:
        e = dict(header[name])
        require(sorted(e) == ["data_offsets", "dtype", "shape"], f"{name}: bad entry {e}")
        begin, end = e["data_offsets"]
        require(begin == offset, f"{name}: not contiguous (begins at {begin}, expected {offset})")
        a = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=ST_NUMPY[e["dtype"]])
        tensors[name] = a.reshape(e["shape"])
        require(a.nbytes == end - begin, f"{name}: span {end - begin} != {a.nbytes}")
        offset = end
    require(8 + n + offset == len(data), f"file has {len(data) - 8 - n - offset} bytes after the tensors")
    dtypes = {k: dict(header[k])["dtype"] for k in names}
    require(names == sorted(names, key=lambda k: (-ST_ORDER.index(dtypes[k]), k)), "tensors not in dtype-then-name order")
    return meta, tensors, names


def same_bits(a, b):
    """Equal dtype, shape and bytes (so NaN == NaN and -0.0 != 0.0)."""
    a, b = np.asarray(a), np.asarray(b)
    return (a.dtype.newbyteorder("<") == b.dtype.newbyteorder("<") and a.shape == b.shape
            and a.tobytes() == b.tobytes())  # tobytes() is in C order


def run_converter(src, dst, cwd=None):
    r = subprocess.run([sys.executable, CONVERTER, src, dst], capture_output=True, text=True, cwd=cwd, timeout=120)
    return r.returncode, r.stdout, r.stderr


def convert_and_read(name, src, tmp):
    dst = os.path.join(tmp, os.path.basename(os.path.dirname(src)) + ".safetensors")
    code, _, err = run_converter(src, dst)
    check(f"{name} converts", code == 0, err.strip())
    return read_safetensors(dst) if code == 0 else (None, None, None)


def test_ernie_fixtures(tmp):
    """Every ERNIE .pdparams equals its model's paddle/model.safetensors, bit for bit."""
    found = sorted(glob.glob(os.path.join(FIXTURES, "ernie", "*", "*", "model_state.pdparams")))
    check("four ERNIE .pdparams fixtures", len(found) >= 4, f"found {found}")
    for src in found:
        name = os.path.relpath(src, FIXTURES)
        ref_path = os.path.join(os.path.dirname(os.path.dirname(src)), "paddle", "model.safetensors")
        meta, got, _ = convert_and_read(name, src, tmp)
        if got is None:
            continue
        _, ref, _ = read_safetensors(ref_path)
        check(f"{name}: metadata", meta == {"format": "np"}, meta)
        check(f"{name}: names", set(got) == set(ref) | {"cls.predictions.decoder_weight"},
              sorted(set(got) ^ set(ref)))
        bad = [k for k in ref if k in got and not same_bits(got[k], ref[k])]
        check(f"{name}: tensors bit-identical", not bad, bad)
        word = ref["ernie.embeddings.word_embeddings.weight"]
        check(f"{name}: decoder_weight is the word embeddings",
              same_bits(got.get("cls.predictions.decoder_weight"), word))


def test_writer_layout(tmp):
    """The converter's writer reproduces the fixtures' safetensors files byte for byte
    (they were written independently, in the official writer's layout)."""
    for path in sorted(glob.glob(os.path.join(FIXTURES, "ernie", "*", "*", "model.safetensors"))):
        meta, tensors, _ = read_safetensors(path)
        out = os.path.join(tmp, "rewrite.safetensors")
        convert_checkpoint.write_safetensors(out, tensors, meta)
        same = open(out, "rb").read() == open(path, "rb").read()
        check(f"writer reproduces {os.path.relpath(path, FIXTURES)}", same)


def protocol_of(data):
    return next(arg for op, arg, _ in pickletools.genops(data) if op.name == "PROTO")


def test_generated_roundtrip(tmp):
    """The generated pickles (protocols 2, 3, 4; split or not) give back tensors() exactly."""
    expected = make_pdparams_fixtures.tensors()
    for fname, protocol, split in [("dtypes_p4", 4, False), ("dtypes_p2", 2, False),
                                   ("split_p2", 2, True), ("split_p3", 3, True)]:
        src = os.path.join(GENERATED, fname + ".pdparams")
        data = open(src, "rb").read()
        check(f"{fname}: is protocol {protocol}", protocol_of(data) == protocol)
        check(f"{fname}: split={split}", (b"UnpackBigParamInfor@@" in data) == split)
        dst = os.path.join(tmp, fname + ".safetensors")
        code, _, err = run_converter(src, dst)
        check(f"{fname} converts", code == 0, err.strip())
        if code != 0:
            continue
        _, got, _ = read_safetensors(dst)
        check(f"{fname}: names", set(got) == set(expected), sorted(set(got) ^ set(expected)))
        bad = [k for k in expected if not same_bits(got.get(k), expected[k])]
        check(f"{fname}: tensors bit-identical", not bad, bad)


def expect_refusal(name, src, reason, tmp, dst_name="out.safetensors"):
    """One line naming the input and the reason (if given) on stderr, exit 1, no traceback,
    and the directory of the output holds exactly what it held before."""
    out_dir = tempfile.mkdtemp(dir=tmp)
    dst = os.path.join(out_dir, dst_name)
    before = sorted(os.listdir(out_dir))
    code, out, err = run_converter(src, dst, cwd=out_dir)
    lines = err.splitlines()
    check(f"{name}: exit 1", code == 1, f"exit {code}")
    check(f"{name}: one line on stderr", len(lines) == 1 and not out, repr(err + out))
    prefix = f"convert_checkpoint.py: {src}: "
    check(f"{name}: message", lines[:1] == [prefix + reason] if reason else err.startswith(prefix), repr(err))
    check(f"{name}: no traceback", "Traceback" not in err)
    check(f"{name}: nothing written", sorted(os.listdir(out_dir)) == before, os.listdir(out_dir))
    return out_dir


def test_refusals(tmp):
    fx = lambda name: os.path.join(GENERATED, name)  # noqa: E731
    evil = fx("malicious_os_system.pdparams")
    check("malicious fixture really calls os.system",
          ("GLOBAL", "os system") in [(op.name, arg) for op, arg, _ in pickletools.genops(open(evil, "rb").read())])
    d = expect_refusal("malicious pickle", evil, "refusing to unpickle os.system: only numpy arrays are allowed", tmp)
    check("malicious pickle: command not run", not os.path.exists(os.path.join(d, "pwned_by_pdparams")))

    # A failed run leaves an existing output untouched.
    out_dir = tempfile.mkdtemp(dir=tmp)
    old = os.path.join(out_dir, "old.safetensors")
    open(old, "wb").write(b"previous contents")
    run_converter(evil, old)
    check("failed run keeps the old output", open(old, "rb").read() == b"previous contents"
          and os.listdir(out_dir) == ["old.safetensors"], os.listdir(out_dir))

    truncated = os.path.join(FIXTURES, "bad", "truncated.pdparams")
    check("truncated.pdparams fixture exists", os.path.exists(truncated))
    expect_refusal("truncated pickle", truncated, "UnpicklingError: pickle data was truncated", tmp)
    missing = os.path.join(tmp, "no_such_file.pdparams")
    expect_refusal("missing input", missing, "No such file or directory", tmp)
    slice_name = "ernie.embeddings.word_embeddings.weight"
    expect_refusal("missing slice", fx("split_missing_slice.pdparams"),
                   f"'{slice_name}': slice '{slice_name}@@.1' is missing", tmp)
    expect_refusal("wrong OriginShape", fx("split_wrong_shape.pdparams"),
                   "'half.weight': slices hold 24 elements, but OriginShape [2, 3, 5] needs 30", tmp)
    expect_refusal("non-array value", fx("not_an_array.pdparams"), "'step' holds int, expected a numpy array", tmp)
    expect_refusal("unknown extension", os.path.join(FIXTURES, "bad", "base_tiny", "model.safetensors"),
                   "expected a .pdparams or .bin file", tmp)

    # Output directories that cannot be written (by root either): missing, or a file.
    good = fx("dtypes_p4.pdparams")
    for label, out in [("missing output dir", os.path.join(tmp, "no_dir", "out.safetensors")),
                       ("output dir is a file", os.path.join(old, "out.safetensors"))]:
        code, _, err = run_converter(good, out)
        check(f"{label}: exit 1, one line naming the output", code == 1 and len(err.splitlines()) == 1
              and f"cannot write {out}:" in err and "Traceback" not in err, repr(err))
        check(f"{label}: nothing written", not os.path.exists(os.path.dirname(out)) or os.path.isfile(os.path.dirname(out)))


def test_edge_pickles(tmp):
    """Pickles Paddle does not write but a converter meets: wrong top level, object arrays,
    big-endian data."""
    cases = {
        "list.pdparams": ([np.ones(2, np.float32)], "expected a pickled dict of arrays, got list"),
        "object.pdparams": ({"w": np.array([1, "a"], dtype=object)}, "'w': dtype object is not supported"),
        "stray_slice.pdparams": ({"w@@.0": np.ones(2, np.float32)}, "'w@@.0' is not listed in UnpackBigParamInfor@@"),
        "string_shape.pdparams": ({"w@@.0": np.ones(2, np.float32), "UnpackBigParamInfor@@": {"w": {
            "OriginShape": "12", "slices": ["w@@.0"]}}}, "expected {'OriginShape': [ints], 'slices': [names]}"),
    }
    for fname, (obj, reason) in cases.items():
        src = os.path.join(tmp, fname)
        open(src, "wb").write(pickle.dumps(obj, protocol=2))
        code, _, err = run_converter(src, os.path.join(tmp, "edge.safetensors"))
        check(f"{fname}: refused", code == 1 and reason in err and len(err.splitlines()) == 1, repr(err))

    big_endian = np.arange(6, dtype=">i4").reshape(2, 3) - 3
    src, dst = os.path.join(tmp, "be.pdparams"), os.path.join(tmp, "be.safetensors")
    open(src, "wb").write(pickle.dumps({"be": big_endian}, protocol=4))
    code, _, err = run_converter(src, dst)
    ok = code == 0 and np.array_equal(read_safetensors(dst)[1]["be"], big_endian)
    check("big-endian array is stored little-endian", ok, err)


TORCH_SCRIPT = r"""
import os, sys, torch
class Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned_by_bin",))
w = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7
state = {"ernie.embeddings.word_embeddings.weight": w, "transposed": w.t(), "row": w[1],
         "half": w.half(), "ernie.embeddings.position_ids": torch.arange(5).reshape(1, 5),
         "mask": w > 0.5, "param": torch.nn.Parameter(w)}
torch.save(state, sys.argv[1])
torch.save({"w": w, "evil": Evil()}, sys.argv[2])
"""


def test_torch(tmp):
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skipped: torch is not importable, the .bin check did not run")
        return
    src, dst = os.path.join(tmp, "pytorch_model.bin"), os.path.join(tmp, "torch.safetensors")
    evil = os.path.join(tmp, "evil.bin")
    subprocess.run([sys.executable, "-c", TORCH_SCRIPT, src, evil], check=True, timeout=120)
    d = expect_refusal("malicious .bin", evil, None, tmp)
    check("malicious .bin: command not run", not os.path.exists(os.path.join(d, "pwned_by_bin")))
    code, _, err = run_converter(src, dst)
    check("torch .bin converts", code == 0, err.strip())
    if code != 0:
        return
    meta, got, _ = read_safetensors(dst)
    w = (np.arange(12, dtype=np.float32).reshape(3, 4) / np.float32(7))
    expected = {"ernie.embeddings.word_embeddings.weight": w, "transposed": w.T, "row": w[1],
                "half": w.astype(np.float16), "ernie.embeddings.position_ids": np.arange(5).reshape(1, 5),
                "mask": w > 0.5, "param": w}
    check("torch: names", set(got) == set(expected), sorted(set(got) ^ set(expected)))
    bad = [k for k in expected if not same_bits(got.get(k), expected[k])]
    check("torch: tensors bit-identical", not bad, bad)


def test_hostile_files(tmp):
    """Files made to hurt the converter rather than by a framework: each is one line, nothing written."""
    good = os.path.join(tmp, "good.pdparams")
    open(good, "wb").write(pickle.dumps({"w": np.arange(6, dtype=np.float32)}, protocol=2))
    # numpy.ndarray called by the pickle itself: 2^28 floats over a 4-byte buffer (1 GiB written).
    huge = os.path.join(tmp, "ndarray_call.pdparams")
    open(huge, "wb").write(b"\x80\x02}X\x01\x00\x00\x00wcnumpy\nndarray\n(J\x00\x00\x00\x10\x85cnumpy\ndtype\n"
                           b"X\x02\x00\x00\x00f4\x85RC\x04\x00\x00\x80?K\x00K\x00\x85tRs.")
    expect_refusal("ndarray called directly", huge,
                   "numpy.ndarray called directly: only arrays whose bytes are in the file are allowed", tmp)
    # A dict key nested 200,000 deep crashes Python's unpickler in C (SIGSEGV), past any except.
    deep = os.path.join(tmp, "deep.pdparams")
    open(deep, "wb").write(b"\x80\x02})" + b"\x85" * 200000 + b"cnumpy\ndtype\nX\x02\x00\x00\x00f4\x85Rs.")
    expect_refusal("nesting 200,000 deep", deep, None, tmp)
    # A TorchScript archive runs code in torch.load before torch 2.6: refused before torch is imported.
    ts = os.path.join(tmp, "torchscript.bin")
    with zipfile.ZipFile(ts, "w") as z:
        z.writestr("archive/constants.pkl", b"")
        z.writestr("archive/code/__torch__.py", "import os; os.system('touch pwned')")
    expect_refusal("TorchScript archive", ts, "a TorchScript archive (torch.jit.save): loading it would run its "
                   "code; save the model's state_dict with torch.save instead", tmp)
    # The output may not be the input (or any checkpoint): it replaced the pickle.
    before = open(good, "rb").read()
    code, _, err = run_converter(good, good)
    check("output = input refused", code == 1 and "would replace a checkpoint" in err and open(good, "rb").read() == before, err)
    # An interrupt while writing leaves neither the output nor the temporary file.
    big = os.path.join(tmp, "big.pdparams")
    open(big, "wb").write(pickle.dumps({"w": np.ones(50_000_000, np.float32)}, protocol=4))
    out_dir = tempfile.mkdtemp(dir=tmp)
    p = subprocess.Popen([sys.executable, CONVERTER, big, os.path.join(out_dir, "big.safetensors")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while p.poll() is None and not any(n.endswith(".tmp") for n in os.listdir(out_dir)):
        time.sleep(0.001)
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        check("SIGTERM while writing: exit 1, one line", p.returncode == 1 and len(err.splitlines()) == 1, repr(err))
        check("SIGTERM while writing: nothing left", os.listdir(out_dir) == [], os.listdir(out_dir))
    else:
        print("skipped: the conversion ended before an interrupt could be sent")
    os.unlink(big)


def main():
    with tempfile.TemporaryDirectory(prefix="test_convert_") as tmp:
        for test in [test_ernie_fixtures, test_writer_layout, test_generated_roundtrip, test_refusals,
                     test_edge_pickles, test_hostile_files, test_torch]:
            try:
                test(tmp)
            except Exception as e:  # a crash in one test is a failure, not the end of the run
                check(test.__name__, False, f"{type(e).__name__}: {e}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
