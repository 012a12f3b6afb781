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
tensor) constructors. Bad input gets one line on stderr and exit status 1; the output is
written to a temporary file and renamed, so a failed run leaves nothing behind.
"""
import codecs
import collections
import inspect
import json
import math
import os
import pickle
import struct
import sys
import tempfile

import numpy as np

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

# The only globals a pickle of numpy arrays needs (numpy 1 and 2 spell the module differently).
NUMPY_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "ndarray"): np.ndarray,
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
    try:
        shape, slices = tuple(int(d) for d in info["OriginShape"]), list(info["slices"])
    except (TypeError, KeyError, ValueError):
        raise ConvertError(f"{UNPACK_INFO}['{key}']: expected {{'OriginShape': [...], 'slices': [...]}}")
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


def write_safetensors(path, tensors, metadata):
    """Write atomically: a temporary file in the same directory, fsync, rename."""
    header, arrays = safetensors_bytes(tensors, metadata)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
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


def main(argv):
    if len(argv) != 3:
        print("usage: convert_checkpoint.py INPUT(.pdparams|.bin) OUTPUT.safetensors", file=sys.stderr)
        return 2
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
