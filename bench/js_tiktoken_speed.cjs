// A js-tiktoken encoding timed on one file: a peer of bench/bench_bpe.
// usage: node js_tiktoken_speed.cjs FILE ROUNDS [ENCODING]   (ENCODING: gpt2; special tokens' strings are text)
// prints {"seconds": [...], "tokens": N, "version": "...", "node": "..."}
const fs = require("fs");
const { Tiktoken } = require("js-tiktoken/lite");
const enc = new Tiktoken(require(`js-tiktoken/ranks/${process.argv[4] || "gpt2"}`));
const text = fs.readFileSync(process.argv[2], "utf8");
const rounds = Number(process.argv[3] || 5);
let tokens = enc.encode(text, [], []).length;  // warm-up (JIT, caches)
const seconds = [];
for (let r = 0; r < rounds; ++r) {
  const t0 = process.hrtime.bigint();
  tokens = enc.encode(text, [], []).length;
  seconds.push(Number(process.hrtime.bigint() - t0) / 1e9);
}
const path = require("path");
const pkg = path.join(path.dirname(require.resolve("js-tiktoken/lite")), "..", "package.json");
const version = JSON.parse(fs.readFileSync(fs.existsSync(pkg) ? pkg : path.join(path.dirname(pkg), "..", "package.json"), "utf8")).version;
process.stdout.write(JSON.stringify({ seconds, tokens, version: "js-tiktoken " + version, node: process.version }));
