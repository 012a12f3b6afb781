#!/usr/bin/python3
"""Write the .pdparams fixtures of tests/test_convert.py into tests/fixtures/convert/.

    /usr/bin/python3 scripts/make_pdparams_fixtures.py [OUT_DIR]

The pickles are built the way `paddle.save(state_dict, path, protocol=P)` builds them, with
numpy only: a plain dict of numpy arrays plus "StructuredToParameterName@@", passed through
a copy of `paddle.framework.io._unpack_saved_dict` (which splits big arrays into slices, and
only for protocols 2 and 3), then `pickle.dump`. Paddle's split limit is (2**30 - 1) bytes;
here it is a parameter, lowered so that small arrays get split.
"""
import math
import os
import pickle
import struct
import sys

try:
    import numpy as np
except ImportError:  # a pyenv or venv python without it: say how to get it, not a traceback
    sys.exit("scripts/make_pdparams_fixtures.py: needs numpy: sudo apt-get install python3-numpy, then run it as scripts/make_pdparams_fixtures.py (its shebang is /usr/bin/python3, Debian's python)")


def tensors():
    """The state dict every good fixture holds. Values are exact in every dtype (no random
    generator whose stream could change between numpy versions)."""
    n = np.arange(24)
    wave = (n * 37 % 101 - 50) / 8.0  # multiples of 1/8: exact in float16 too
    return {
        "ernie.embeddings.word_embeddings.weight": wave.astype(np.float32).reshape(6, 4),
        "ernie.encoder.layers.0.linear1.weight": np.asfortranarray(wave.astype(np.float32).reshape(4, 6)),
        "half.weight": wave.astype(np.float16).reshape(2, 3, 4),
        "double.weight": (wave / 3).reshape(8, 3),
        "specials": np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4028235e38, -1.5], np.float32),
        "position_ids": (n - 12) * 2**40,
        "int32.ids": (n - 12).astype(np.int32) * 100_000_007,
        "int8.ids": (n * 11 % 256 - 128).astype(np.int8),
        "uint8.flags": (n * 11 % 256).astype(np.uint8),
        "bool.mask": n % 3 == 0,
        "scalar": np.array(1.5, np.float32),
        "empty": np.zeros((0, 3), np.float32),
    }


def unpack_saved_dict(saved_obj, protocol, max_bytes=2**30 - 1):
    """paddle.framework.io._unpack_saved_dict, with its byte limit as a parameter."""
    temp_saved_obj, unpack_infor = {}, {}
    if 1 < protocol < 4:
        for key, value in saved_obj.items():
            if isinstance(value, np.ndarray):
                max_number_of_element = int(max_bytes / value.dtype.itemsize)
                num_element = np.prod(value.shape)
                if num_element > max_number_of_element:
                    unpack_infor[key] = {"OriginShape": value.shape, "slices": []}
                    value = value.flatten()
                    for i in range(int(math.ceil(num_element * 1.0 / max_number_of_element))):
                        part_name = key + "@@." + str(i)
                        unpack_infor[key]["slices"].append(part_name)
                        temp_saved_obj[part_name] = value[i * max_number_of_element:max_number_of_element * (i + 1)]
    if unpack_infor:
        for key, value in unpack_infor.items():
            if key in saved_obj:
                saved_obj.pop(key)
                for part in value["slices"]:
                    saved_obj[part] = temp_saved_obj[part]
        saved_obj["UnpackBigParamInfor@@"] = unpack_infor
    return saved_obj


def paddle_state(protocol, max_bytes=2**30 - 1):
    """What paddle.save pickles for tensors(): arrays, the name table, and split arrays."""
    state = tensors()
    state["StructuredToParameterName@@"] = {k: f"param_{i}.w_0" for i, k in enumerate(state)}
    return unpack_saved_dict(state, protocol, max_bytes)


def malicious_pickle():
    """A protocol-2 state dict whose second value is os.system("touch pwned_by_pdparams").
    Written opcode by opcode: pickling os.system itself would name posix.system."""
    good = pickle.dumps({"weight": np.ones(2, np.float32)}, protocol=2)
    assert good.endswith(b".")

    def unicode(s):  # BINUNICODE
        return b"X" + struct.pack("<I", len(s)) + s.encode()
    evil = unicode("evil") + b"cos\nsystem\n" + unicode("touch pwned_by_pdparams") + b"\x85R" + b"s"
    return good[:-1] + evil + b"."  # key, os.system, (cmd,), TUPLE1, REDUCE, SETITEM, STOP


def fixtures():
    """{file name: pickle bytes}."""
    split = 40  # bytes: a float32 array over 10 elements is split, as over 2**30-1 in Paddle
    missing = paddle_state(2, split)
    del missing["ernie.embeddings.word_embeddings.weight@@.1"]
    wrong = paddle_state(2, split)
    wrong["UnpackBigParamInfor@@"]["half.weight"]["OriginShape"] = (2, 3, 5)
    not_array = {"weight": np.ones(2, np.float32), "step": 7}
    return {
        "dtypes_p4.pdparams": pickle.dumps(paddle_state(4), protocol=4),
        "dtypes_p2.pdparams": pickle.dumps(paddle_state(2), protocol=2),
        "split_p2.pdparams": pickle.dumps(paddle_state(2, split), protocol=2),
        "split_p3.pdparams": pickle.dumps(paddle_state(3, split), protocol=3),
        "split_missing_slice.pdparams": pickle.dumps(missing, protocol=2),
        "split_wrong_shape.pdparams": pickle.dumps(wrong, protocol=2),
        "not_an_array.pdparams": pickle.dumps(not_array, protocol=4),
        "malicious_os_system.pdparams": malicious_pickle(),
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "convert")
    os.makedirs(out, exist_ok=True)
    for name, data in fixtures().items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
