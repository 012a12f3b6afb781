#!/usr/bin/env python3
# labs/06_grad_accum/compare_grads.py A.safetensors B.safetensors: the relative difference
# |A - B| / |B| over every tensor of two `pipetrain train --dump-grads` files (Python's standard
# library alone), and how many values differ at all.
import json, math, struct, sys


def read(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    return {name: struct.unpack('<%df' % ((t['data_offsets'][1] - t['data_offsets'][0]) // 4),
                                data[t['data_offsets'][0]:t['data_offsets'][1]])
            for name, t in header.items() if name != '__metadata__' and t['dtype'] == 'F32'}


a, b = read(sys.argv[1]), read(sys.argv[2])
diff = norm = 0.0
differ = total = 0
for name in b:
    for x, y in zip(a[name], b[name]):
        diff, norm = diff + (x - y) ** 2, norm + y * y
        differ, total = differ + (x != y), total + 1
print('relative difference %.2e; %d of %d values differ' % (math.sqrt(diff / norm), differ, total))
