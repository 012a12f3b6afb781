#!/usr/bin/python3
"""Convert a PaddleNLP or PyTorch checkpoint to safetensors, keeping names and layouts.

    python3 scripts/convert_checkpoint.py INPUT(.pdparams|.bin) OUTPUT.safetensors

* `.pdparams` (what `paddle.save(model.state_dict())` writes): a pickle of a dict of numpy
  arrays. Big arrays that Paddle split into `<key>@@.0`, `@@.1`, ... slices are rebuilt as
  `paddle.framework.io._pack_loaded_dict` does; `StructuredToParameterName@@` is dropped.
  Needs numpy only.
* `.bin` (a `pytorch_model.bin` zip written by `torch.save`): needs torch.

No tensor is renamed or transposed: pipetrain's loader maps Paddle and Hugging Face names.
Pickles can run code, so both paths unpickle through an allow-list of numpy (and torch
tensor) constructors, numpy.ndarray only as what `_reconstruct` rebuilds; TorchScript
archives are refused. Bad input gets one line on stderr and exit status 1; the output is
written to a temporary file and renamed, so a failed run leaves nothing behind. The work runs
in a child process, so that a crash inside Python's own unpickler, or an interrupt, still ends
that way.
"""
import codecs
import collections
import inspect
import json
import math
import os
import pickle
import signal
import struct
import sys
import zipfile

try:
    import numpy as np
except ImportError:  # a pyenv or venv python without it: say how to get it, not a traceback
    sys.exit("scripts/convert_checkpoint.py: needs numpy: sudo apt-get install python3-numpy, then run it as scripts/convert_checkpoint.py (its shebang is /usr/bin/python3, Debian's python)")

UNPACK_INFO = "UnpackBigParamInfor@@"      # Paddle's spelling
NAME_TABLE = "StructuredToParameterName@@"

# numpy dtype (without byte order) -> safetensors dtype, and the Rust enum order of the
# official writer, which sorts tensors by dtype (largest first), then by name.
ST_DTYPE = {"f8": "F64", "f4": "F32", "f2": "F16", "i8": "I64", "i4": "I32", "i1": "I8",
            "u1": "U8", "b1": "BOOL"}
ST_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32",
            "U32", "F32", "F64", "I64", "U64"]

try:
    from numpy._core.multiarray import _reconstruct  # numpy >= 2 (and 1.26)
except ImportError:
    from numpy.core.multiarray import _reconstruct

class NdarrayToken:
    """What a pickle gets for numpy.ndarray: usable as _reconstruct's argument only. The real
    class, called directly, would build an array over any buffer (or uninitialised memory) of a
    size the file does not hold."""
    def __new__(cls, *args, **kwargs):
        raise ConvertError("numpy.ndarray called directly: only arrays whose bytes are in the file are allowed")


def reconstruct(subtype, shape, dtype):
    if subtype is not NdarrayToken:
        raise ConvertError("only numpy arrays are allowed")
    return _reconstruct(np.ndarray, shape, dtype)  # then filled by __setstate__ from the file's bytes


# The only globals a pickle of numpy arrays needs (numpy 1 and 2 spell the module differently).
NUMPY_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): reconstruct,
    ("numpy", "ndarray"): NdarrayToken,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): codecs.encode,  # protocol 2 stores bytes as encode(str, 'latin1')
    ("collections", "OrderedDict"): collections.OrderedDict,
    # Protocol 2 pickles an empty bytes object (the data of an empty array) as bytes().
    ("__builtin__", "bytes"): bytes,
    ("builtins", "bytes"): bytes,
}


class ConvertError(Exception):
    pass


def restricted_unpickler(allowed):
    """A pickle.Unpickler class that can only build the globals in `allowed` {(module, name): object}."""
    class RestrictedUnpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) not in allowed:
                raise ConvertError(f"refusing to unpickle {module}.{name}: only numpy arrays are allowed")
            return allowed[(module, name)]
    return RestrictedUnpickler


def load_pdparams(path):
    """{name: array} from a Paddle state-dict pickle, with split arrays joined again."""
    with open(path, "rb") as f:
        obj = restricted_unpickler(NUMPY_GLOBALS)(f).load()
    if not isinstance(obj, dict):
        raise ConvertError(f"expected a pickled dict of arrays, got {type(obj).__name__}")
    obj = dict(obj)
    obj.pop(NAME_TABLE, None)
    unpack_info = obj.pop(UNPACK_INFO, {})
    if not isinstance(unpack_info, dict):
        raise ConvertError(f"'{UNPACK_INFO}' is a {type(unpack_info).__name__}, expected a dict")
    for key, info in unpack_info.items():
        obj[key] = join_slices(obj, key, info)
    for key, value in obj.items():
        if "@@" in str(key):
            raise ConvertError(f"'{key}' is not listed in {UNPACK_INFO}")
        if not isinstance(value, np.ndarray):
            raise ConvertError(f"'{key}' holds {type(value).__name__}, expected a numpy array")
    return obj


def join_slices(obj, key, info):
    """Undo paddle.framework.io._unpack_saved_dict for one key: concatenate, then reshape.
    The slices are removed from obj."""
    shape, slices = info.get("OriginShape") if isinstance(info, dict) else None, info.get("slices") if isinstance(info, dict) else None
    # Lists of ints and of names, exactly: "12" is not the shape [1, 2], nor 1.9 the size 1.
    if not (isinstance(shape, (list, tuple)) and all(type(d) is int for d in shape)
            and isinstance(slices, (list, tuple)) and all(isinstance(n, str) for n in slices)):
        raise ConvertError(f"{UNPACK_INFO}['{key}']: expected {{'OriginShape': [ints], 'slices': [names]}}")
    shape, slices = tuple(shape), list(slices)
    if key in obj:
        raise ConvertError(f"'{key}' is stored both whole and split into slices")
    if not slices or any(d < 0 for d in shape):
        raise ConvertError(f"{UNPACK_INFO}['{key}']: bad shape {shape} or no slices")
    parts = []
    for name in slices:
        if name not in obj:
            raise ConvertError(f"'{key}': slice '{name}' is missing")
        part = obj.pop(name)
        if not isinstance(part, np.ndarray) or part.ndim != 1 or (parts and part.dtype != parts[0].dtype):
            raise ConvertError(f"'{key}': slice '{name}' is not a 1-D array of the same dtype as the others")
        parts.append(part)
    total, numel = sum(p.size for p in parts), math.prod(shape)  # exact, no int64 wrap
    if total != numel:
        raise ConvertError(f"'{key}': slices hold {total} elements, but OriginShape {list(shape)} needs {numel}")
    return np.concatenate(parts).reshape(shape)


def load_torch_bin(path):
    """{name: array} from a pytorch_model.bin; the only code path that needs torch."""
    # torch.load hands a TorchScript archive to torch.jit.load, which runs its code, even with
    # weights_only=True before torch 2.6 (CVE-2025-32434); torch.save never writes these members.
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            if any(n.endswith("/constants.pkl") or "/code/" in n for n in z.namelist()):
                raise ConvertError("a TorchScript archive (torch.jit.save): loading it would run its code; "
                                   "save the model's state_dict with torch.save instead")
    try:
        import torch
    except ImportError:
        raise ConvertError("reading .bin files needs PyTorch: apt-get install python3-torch")
    if "weights_only" in inspect.signature(torch.load).parameters:
        state = torch.load(path, map_location="cpu", weights_only=True)
    else:
        # Older torch: its unpickler subclasses pickle_module.Unpickler and resolves storage
        # types itself, so restricting that class restricts every other global.
        allowed = {**NUMPY_GLOBALS, ("torch._utils", "_rebuild_tensor_v2"): torch._utils._rebuild_tensor_v2,
                   ("torch._utils", "_rebuild_parameter"): torch._utils._rebuild_parameter}
        module = type(sys)("restricted_pickle")
        module.Unpickler = restricted_unpickler(allowed)
        state = torch.load(path, map_location="cpu", pickle_module=module)
    if not isinstance(state, dict):
        raise ConvertError(f"expected a state_dict, got {type(state).__name__}")
    out = {}
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise ConvertError(f"'{key}' holds {type(value).__name__}, expected a tensor")
        if value.dtype == torch.bfloat16:
            raise ConvertError(f"'{key}': bfloat16 is not supported")
        # torch >= 2 counts storage in bytes (untyped_storage); Tensor.storage() is deprecated there.
        stored = (value.untyped_storage().nbytes() // value.element_size() if hasattr(value, "untyped_storage")
                  else value.storage().size())
        if value.numel() > stored:  # e.g. expand(): 1 stored element seen 2^28 times
            raise ConvertError(f"'{key}': a view with more elements ({value.numel()}) than its storage holds")
        out[key] = value.detach().numpy()  # strided is fine: tobytes() writes C order
    return out


def safetensors_bytes(tensors, metadata):
    """(header, [array]) in the layout of the official writer."""
    entries = []
    for name, a in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ConvertError(f"{name!r} cannot be a tensor name")
        dt = ST_DTYPE.get(a.dtype.str[1:])
        if dt is None:
            raise ConvertError(f"'{name}': dtype {a.dtype} is not supported "
                               "(expected float64/32/16, int64/32/8, uint8 or bool)")
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)  # tobytes() below writes C order
        entries.append((-ST_ORDER.index(dt), name, dt, a))
    entries.sort(key=lambda e: (e[0], e[1]))
    header, offset = {"__metadata__": metadata}, 0
    for _, name, dt, a in entries:
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    return text, [e[3] for e in entries]


def temp_path(path):
    """The temporary file next to `path` that this run (the parent's pid) writes first."""
    return os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.{os.getppid() if CHILD else os.getpid()}.tmp")


def write_safetensors(path, tensors, metadata):
    """Write atomically: a temporary file in the same directory, fsync, rename."""
    header, arrays = safetensors_bytes(tensors, metadata)
    directory, tmp = os.path.dirname(os.path.abspath(path)), temp_path(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        raise ConvertError(f"cannot write {path}: {e.strerror}")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(header)))
            f.write(header)
            for a in arrays:
                f.write(a.tobytes())
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates it 0600
        os.replace(tmp, path)
        dir_fd = os.open(directory, os.O_RDONLY)  # make the rename itself durable
        os.fsync(dir_fd)
        os.close(dir_fd)
    except OSError as e:
        raise ConvertError(f"cannot write {path}: {e.strerror}")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def convert(src, dst):
    if (os.path.exists(dst) and os.path.exists(src) and os.path.samefile(src, dst)) or dst.endswith((".pdparams", ".bin")):
        raise ConvertError(f"the output {dst} would replace a checkpoint: write OUTPUT.safetensors")
    if src.endswith(".pdparams"):
        tensors, fmt = load_pdparams(src), "np"
    elif src.endswith(".bin"):
        tensors, fmt = load_torch_bin(src), "pt"
    else:
        raise ConvertError("expected a .pdparams or .bin file")
    if not tensors:
        raise ConvertError("the checkpoint holds no tensors")
    write_safetensors(dst, tensors, {"format": fmt})
    return len(tensors)


CHILD = False


def main(argv):
    """The conversion runs in a child process: a crafted pickle can crash Python's unpickler
    itself (a key nested 200,000 deep overflows the C stack), and that must still end in one
    line, with no temporary file left behind; so must an interrupt."""
    global CHILD
    if len(argv) != 3:
        print("usage: convert_checkpoint.py INPUT(.pdparams|.bin) OUTPUT.safetensors", file=sys.stderr)
        return 2
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        CHILD = True
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        code = convert_main(argv)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def stop(signum, _frame):
        os.kill(pid, signal.SIGKILL)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    tmp = temp_path(argv[2])
    if os.path.exists(tmp):
        os.unlink(tmp)
    if os.WIFSIGNALED(status):
        why = signal.Signals(os.WTERMSIG(status)).name
        print(f"convert_checkpoint.py: {argv[1]}: stopped by {why} (a crash reading the file, or an interrupt); "
              "nothing written", file=sys.stderr)
        return 1
    return os.WEXITSTATUS(status)


def convert_main(argv):
    try:
        n = convert(argv[1], argv[2])
    except Exception as e:  # bad input of any kind: one line, no traceback
        if isinstance(e, ConvertError):
            reason = str(e)
        elif isinstance(e, OSError) and e.strerror:
            reason = e.strerror  # reading the input
        else:
            reason = f"{type(e).__name__}: {e}"
        print(f"convert_checkpoint.py: {argv[1]}: {' '.join(reason.split())}", file=sys.stderr)
        return 1
    print(f"wrote {n} tensors to {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
