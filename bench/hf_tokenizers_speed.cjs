// Hugging Face's tokenizers (npm @anush008/tokenizers: the Rust library, native) timed on one file with one
// tokenizer.json: a peer of bench/bench_bpe. encode(text, add_special_tokens=true), as parallm's
// encode_with_template. usage: node hf_tokenizers_speed.cjs FILE ROUNDS TOKENIZER_JSON
// prints {"seconds": [...], "tokens": N, "version": "...", "node": "..."}
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require("@anush008/tokenizers");
(async () => {
  const tok = Tokenizer.fromFile(process.argv[4]);
  const text = fs.readFileSync(process.argv[2], "utf8");
  const rounds = Number(process.argv[3] || 5);
  let tokens = (await tok.encode(text, null, { addSpecialTokens: true })).getLength();  // warm-up
  const seconds = [];
  for (let r = 0; r < rounds; ++r) {
    const t0 = process.hrtime.bigint();
    tokens = (await tok.encode(text, null, { addSpecialTokens: true })).getLength();
    seconds.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  const pkg = path.join(path.dirname(require.resolve("@anush008/tokenizers")), "package.json");
  const version = JSON.parse(fs.readFileSync(pkg, "utf8")).version;
  process.stdout.write(JSON.stringify({ seconds, tokens, version: "tokenizers (@anush008) " + version, node: process.version }));
})();
