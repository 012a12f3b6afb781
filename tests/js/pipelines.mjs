// node tests/js/pipelines.mjs COMMAND DIR ...: transformers.js's own pipelines on a model that
// `pipetrain export --onnx` wrote (DIR: config.json, tokenizer files, onnx/model.onnx), nothing
// fetched. Prints JSON on one line.
//   fill-mask DIR TEXT          the fill-mask pipeline's top 5: [{token_str, score}, ...]
//   classify DIR TSV            the text-classification pipeline on each text_a of TSV: every
//                               label's probability, [[p0, p1, ...], ...] in label order
//   greedy DIR N PROMPT         N tokens of greedy generation with onnxruntime on the exported
//                               causal LM: [CLS] + PROMPT, never [CLS]/[MASK]/[UNK], ending at
//                               [SEP] or [PAD]; the ids after [CLS]
import fs from "node:fs";
import path from "node:path";
import ort from "onnxruntime-node";
import { AutoTokenizer, pipeline, env } from "@huggingface/transformers";

const [command, dir, ...rest] = process.argv.slice(2);
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = path.dirname(path.resolve(dir)) + "/";
const name = path.basename(path.resolve(dir));
const options = { local_files_only: true, dtype: "fp32" };

if (command === "fill-mask") {
    const fill = await pipeline("fill-mask", name, options);
    const out = await fill(rest[0], { top_k: 5 });
    console.log(JSON.stringify(out.map((o) => ({ token_str: o.token_str, score: o.score, token: o.token }))));
} else if (command === "classify") {
    const classify = await pipeline("text-classification", name, options);
    const lines = fs.readFileSync(rest[0], "utf8").split("\n").slice(1).filter((l) => l.length > 0);
    const all = [];
    for (const line of lines) {
        const text = line.split("\t")[1];
        const out = await classify(text, { top_k: null });   // every label
        const byLabel = Object.fromEntries(out.map((o) => [o.label, o.score]));
        all.push(Object.keys(byLabel).sort().map((k) => byLabel[k]));
    }
    console.log(JSON.stringify(all));
} else if (command === "greedy") {
    const tokenizer = await AutoTokenizer.from_pretrained(name, { local_files_only: true });
    const session = await ort.InferenceSession.create(path.join(dir, "onnx", "model.onnx"));
    const vocab = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")).model.vocab;
    const id = (t) => vocab[t], size = Math.max(...Object.values(vocab)) + 1;
    const never = new Set([id("[CLS]"), id("[MASK]"), id("[UNK]")]);
    const ids = [id("[CLS]"), ...tokenizer.encode(rest[1], { add_special_tokens: false })];
    for (let made = 0; made < Number(rest[0]); made++) {
        const T = ids.length, feed = (v) => new ort.Tensor("int64", BigInt64Array.from(v.map(BigInt)), [1, T]);
        const out = await session.run({ input_ids: feed(ids), attention_mask: feed(ids.map(() => 1)),
                                        token_type_ids: feed(ids.map(() => 0)) });
        const V = out.logits.dims[2], last = out.logits.data.subarray((T - 1) * V, T * V);
        let best = -1;
        for (let v = 0; v < V && v < size; v++)
            if (!never.has(v) && (best < 0 || last[v] > last[best])) best = v;
        if (best === id("[SEP]") || best === id("[PAD]")) break;
        ids.push(best);
    }
    console.log(JSON.stringify(ids.slice(1)));
} else {
    throw new Error(`unknown command ${command}`);
}
