// node tests/js/onnx_logits.mjs MODEL.onnx DUMP.safetensors LOGITS_NAME: runs onnxruntime-node (its
// CPU binary, the npm package's own) on the batch that `pipetrain eval --dump-logits` wrote into
// DUMP (input_ids, attention_mask, token_type_ids as I64) and compares the "logits" output with
// DUMP's LOGITS_NAME (mlm_logits, causal_logits or logits). Prints one JSON line:
// {"shape": [...], "max_abs_diff": x, "max_abs_ref": y}; positions with attention_mask 0 are
// skipped (their logits are not defined the same way by every implementation).
import fs from "node:fs";
import ort from "onnxruntime-node";

const [modelPath, dumpPath, name] = process.argv.slice(2);
const bytes = fs.readFileSync(dumpPath);
const headerLen = Number(bytes.readBigUInt64LE(0));
const header = JSON.parse(bytes.subarray(8, 8 + headerLen).toString("utf8"));
const base = 8 + headerLen;
function tensor(key) {
    const t = header[key];
    if (!t) throw new Error(`${dumpPath}: no tensor ${key}`);
    const [a, b] = t.data_offsets;
    const buf = bytes.subarray(base + a, base + b);
    const copy = new Uint8Array(buf).buffer;   // aligned
    return { shape: t.shape, data: t.dtype === "I64" ? new BigInt64Array(copy) : new Float32Array(copy) };
}
const feeds = {};
for (const k of ["input_ids", "attention_mask", "token_type_ids"]) {
    const t = tensor(k);
    feeds[k] = new ort.Tensor("int64", t.data, t.shape);
}
const session = await ort.InferenceSession.create(modelPath);
const out = (await session.run(feeds)).logits;
const ref = tensor(name), mask = tensor("attention_mask");
if (out.dims.join(",") !== ref.shape.join(",")) throw new Error(`shape ${out.dims} vs ${ref.shape}`);
const rowLen = ref.shape.length === 3 ? ref.shape[2] : ref.shape[1];
let maxDiff = 0, maxRef = 0;
for (let i = 0; i < ref.data.length; i++) {
    const row = Math.floor(i / rowLen);
    if (ref.shape.length === 3 && mask.data[row] === 0n) continue;
    maxDiff = Math.max(maxDiff, Math.abs(out.data[i] - ref.data[i]));
    maxRef = Math.max(maxRef, Math.abs(ref.data[i]));
}
console.log(JSON.stringify({ shape: out.dims, max_abs_diff: maxDiff, max_abs_ref: maxRef }));
