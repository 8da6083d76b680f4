// Token ids of one text by js-tiktoken's encodings: the oracle of
// tests/data/tokenizer_oracle.sh. js-tiktoken ships its ranks in its own
// compressed form ("<prefix> <first rank> <base64 token>..." lines); this
// writes them out as tiktoken's rank file (OUT/ENC.tiktoken, "<base64> <rank>"
// a line), the file parallm reads.
// usage: node tiktoken_ids.cjs TEXT OUT ENC...   (prints a JSON list of the cases)
// writes OUT/ENC.ordinary.ids (special tokens' strings as text) and OUT/ENC.all.ids (allowed_special="all"),
// uint32 little-endian.
const fs = require("fs");
const path = require("path");
const { Tiktoken } = require("js-tiktoken/lite");

const [textPath, out, ...encodings] = process.argv.slice(2);
// JavaScript's regular expressions differ from those of tiktoken (Rust's regex crate, Unicode White_Space for \s,
// case folding for (?i)) in three places, where js-tiktoken is no oracle: \s takes U+FEFF but not U+0085, and its
// spelled-out contractions ('s|'S|...) miss 's folded to the long s U+017F. Its text leaves those out.
const text = fs.readFileSync(textPath, "utf8").replace(/[\u0085\ufeff]/g, "").replace(/'\u017f/g, "'s");
const textOut = path.join(out, "text_js.txt");
fs.writeFileSync(textOut, text);
const list = [];
for (const name of encodings) {
  const ranks = require(`js-tiktoken/ranks/${name}`);
  let file = "";
  for (const line of ranks.bpe_ranks.split("\n").filter(Boolean)) {
    const [, offset, ...tokens] = line.split(" ");
    tokens.forEach((t, i) => { file += `${t} ${Number(offset) + i}\n`; });
  }
  fs.writeFileSync(path.join(out, name + ".tiktoken"), file);
  const enc = new Tiktoken(ranks);
  const t0 = process.hrtime.bigint();
  const ids = enc.encode(text, [], []);
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const all = enc.encode(text, "all");
  const write = (suffix, v) => fs.writeFileSync(path.join(out, `${name}.${suffix}.ids`), Buffer.from(new Uint32Array(v).buffer));
  write("ordinary", ids);
  write("all", all);
  list.push({ name, text: textOut, ranks: path.join(out, name + ".tiktoken"), pattern: ranks.pat_str, special: ranks.special_tokens,
              ordinary: path.join(out, name + ".ordinary.ids"), all: path.join(out, name + ".all.ids"),
              count: ids.length, seconds });
}
process.stdout.write(JSON.stringify(list));
