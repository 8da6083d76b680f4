// Token ids of one text by Hugging Face's tokenizers (npm @anush008/tokenizers,
// a native build of the Rust library, loading each tokenizer.json offline):
// the oracle of tests/data/tokenizer_oracle.sh. Each case is NAME=FILE[:VARIANT];
// a variant edits the file first (see `variants`), and the file used is written
// to OUT/NAME.json so that parallm reads the very same one.
// usage: node hf_ids.cjs TEXT OUT CASE...   (prints a JSON list of the cases)
// writes OUT/NAME.ids (uint32 little-endian, encode(text, add_special_tokens=true)) and OUT/NAME.decoded
// (decode(ids, skip_special_tokens=false), added tokens' contents as they are). DEEP=NAME,...: cases marked "deep".
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require("@anush008/tokenizers");

const byteLevel = (prefix, regex) => ({ type: "ByteLevel", add_prefix_space: prefix, trim_offsets: true, use_regex: regex });
const added = (id, content, o) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
                                     special: false, ...o });
const variants = {
  // NFC, a prefix space, added tokens with every flag, a template around the text.
  flags: (j) => {
    const n = Math.max(...Object.values(j.model.vocab), ...j.added_tokens.map((a) => a.id)) + 1;
    j.normalizer = { type: "NFC" };
    j.pre_tokenizer = byteLevel(true, true);
    j.added_tokens.push(added(n, "<tool>", { lstrip: true }), added(n + 1, "</tool>", { rstrip: true }),
                        added(n + 2, "xyzzy", { single_word: true, normalized: true }),
                        added(n + 3, "\u00e9t\u00e9", { normalized: true }), added(n + 4, "<|im_start|>", { special: true }));
    j.post_processor = { type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<|im_start|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
               { SpecialToken: { id: "<|endoftext|>", type_id: 0 } }],
      pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: { "<|im_start|>": { id: "<|im_start|>", ids: [n + 4], tokens: ["<|im_start|>"] },
                        "<|endoftext|>": { id: "<|endoftext|>", ids: [j.model.vocab["<|endoftext|>"]], tokens: ["<|endoftext|>"] } } };
  },
  // Two levels: digits one by one, then GPT-2's pattern.
  digits: (j) => {
    j.pre_tokenizer = { type: "Sequence", pretokenizers: [{ type: "Digits", individual_digits: true }, byteLevel(false, true)] };
  },
};

(async () => {
  const [textPath, out, ...cases] = process.argv.slice(2);
  const deep = (process.env.DEEP || "").split(",");  // the cases whose meta.json form the test also checks
  const text = fs.readFileSync(textPath, "utf8");
  const list = [];
  for (const c of cases) {
    const [name, spec] = c.split(/=(.*)/s);
    const [file, variant] = spec.split(":");
    const j = JSON.parse(fs.readFileSync(file, "utf8"));
    if (variant) variants[variant](j);
    const used = path.join(out, name + ".json");
    fs.writeFileSync(used, JSON.stringify(j));
    const tok = Tokenizer.fromFile(used);
    const t0 = process.hrtime.bigint();
    const enc = await tok.encode(text, null, { addSpecialTokens: true });
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    const ids = enc.getIds();
    fs.writeFileSync(path.join(out, name + ".ids"), Buffer.from(new Uint32Array(ids).buffer));
    // decode() passes added tokens through the ByteLevel decoder, which garbles a content that is not ASCII
    // ("\u00e9t\u00e9" comes out as "\ufffdt\ufffd"): the runs between added tokens are decoded, contents put between.
    const content = new Map(j.added_tokens.filter((a) => !(a.content in j.model.vocab)).map((a) => [a.id, a.content]));
    let decoded = "", run = [];
    for (const id of ids.concat([-1])) {
      if (id >= 0 && !content.has(id)) { run.push(id); continue; }
      if (run.length) decoded += await tok.decode(run, false);
      run = [];
      if (id >= 0) decoded += content.get(id);
    }
    fs.writeFileSync(path.join(out, name + ".decoded"), decoded);
    list.push({ name, tokenizer: used, ids: path.join(out, name + ".ids"), decoded: path.join(out, name + ".decoded"),
                count: ids.length, seconds, deep: deep.includes(name) });
  }
  process.stdout.write(JSON.stringify(list));
})().catch((e) => { console.error(e); process.exit(1); });
