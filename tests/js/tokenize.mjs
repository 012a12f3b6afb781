// node tests/js/tokenize.mjs MODEL_DIR INPUT.txt: transformers.js's tokenizer, loaded from the
// tokenizer.json (+ tokenizer_config.json) in MODEL_DIR with nothing fetched, on every LF-separated
// line of INPUT.txt; prints one line of ids per input line (no [CLS]/[SEP]), "ERROR <message>" where
// it throws. tests/test_js_consumers.cpp compares them with pipetrain's ids.
import fs from "node:fs";
import path from "node:path";
import { AutoTokenizer, env } from "@huggingface/transformers";

const [dir, input] = process.argv.slice(2);
env.allowRemoteModels = false;   // a download would be a failure, not a fallback
env.allowLocalModels = true;
env.localModelPath = path.dirname(path.resolve(dir)) + "/";
const tokenizer = await AutoTokenizer.from_pretrained(path.basename(path.resolve(dir)), { local_files_only: true });
let text = fs.readFileSync(input, "utf8");
if (text.endsWith("\n")) text = text.slice(0, -1);
const out = [];
for (const line of text.split("\n")) {
    try {
        out.push(tokenizer.encode(line, { add_special_tokens: false }).join(" "));
    } catch (e) {
        out.push("ERROR " + String(e.message).replace(/\n/g, " "));
    }
}
process.stdout.write(out.join("\n") + "\n");
