// GPT-2 token ids of each file, by js-tiktoken's "gpt2" encoding (an
// independent implementation: the oracle of tests/data/bpe_oracle.sh).
// usage: node gpt2_ids.cjs FILE... > ids.json   ({"FILE": [ids], ...})
const fs = require("fs");
const { Tiktoken } = require("js-tiktoken/lite");
const enc = new Tiktoken(require("js-tiktoken/ranks/gpt2"));
const out = {};
for (const f of process.argv.slice(2)) out[f] = enc.encode(fs.readFileSync(f, "utf8"));
process.stdout.write(JSON.stringify(out));
