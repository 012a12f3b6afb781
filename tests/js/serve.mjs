// node tests/js/serve.mjs DIR SECONDS: serves DIR on 127.0.0.1 (a free port, printed first as
// "http://127.0.0.1:PORT/"), until a page POSTs to /result: prints that body and exits 0; exits 1
// after SECONDS without one. The browser test (tests/test_js_consumers.cpp) points headless
// Chromium at the page with ?report=/result.
import fs from "node:fs";
import http from "node:http";
import path from "node:path";

const [dir, seconds] = process.argv.slice(2);
const types = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".mjs": "text/javascript",
                ".wasm": "application/wasm", ".json": "application/json", ".svg": "image/svg+xml" };
const server = http.createServer((req, res) => {
    const url = new URL(req.url, "http://127.0.0.1");
    if (req.method === "POST" && url.pathname === "/result") {
        let body = "";
        req.on("data", (c) => (body += c));
        req.on("end", () => { res.end("ok"); console.log(body); server.close(); process.exit(0); });
        return;
    }
    const file = path.join(dir, decodeURIComponent(url.pathname));
    if (!file.startsWith(path.resolve(dir)) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
        res.statusCode = 404;
        return res.end();
    }
    res.setHeader("Content-Type", types[path.extname(file)] ?? "application/octet-stream");
    fs.createReadStream(file).pipe(res);
});
server.listen(0, "127.0.0.1", () => console.log(`http://127.0.0.1:${server.address().port}/`));
setTimeout(() => { console.log("no result in time"); process.exit(1); }, Number(seconds) * 1000);
