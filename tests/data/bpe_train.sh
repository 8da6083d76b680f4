#!/usr/bin/env bash
# `parallm prepare bpe-train` on tiny Shakespeare: a 1,024-token vocabulary,
# every line round-trips (the command checks each and says so), the corpus
# compresses below 3 bytes a token; `prepare gpt2 --vocab` then encodes the
# corpus with it and a model trains on the result. And `prepare shakespeare`
# without --vocab either fetches GPT-2's files (where a network exists,
# checking their SHA-256) or fails saying to pass --vocab DIR.
# Usage: bpe_train.sh <parallm> <tiny shakespeare input.txt>
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
"$parallm" prepare bpe-train --vocab_size 1024 --input "$input" --out "$work/tok" >"$work/train_bpe.log" 2>&1 ||
  { cat "$work/train_bpe.log"; fail "bpe-train"; }
cat "$work/train_bpe.log"
grep -q "trained a 1024-token BPE" "$work/train_bpe.log" || fail "not 1024 tokens"
grep -qE "all [0-9]+ lines round-trip" "$work/train_bpe.log" || fail "no round-trip line"
bpt=$(sed -nE 's/.* ([0-9.]+) bytes a token.*/\1/p' "$work/train_bpe.log" | head -1)
awk -v b="$bpt" 'BEGIN { exit !(b > 1 && b < 3) }' || fail "$bpt bytes a token"
"$parallm" prepare gpt2 --vocab "$work/tok" --input "$input" --out "$work/ds" >"$work/prep.log" 2>&1 ||
  { cat "$work/prep.log"; fail "prepare gpt2 --vocab"; }
grep -q "tokenizer bpe, vocab size 1024" "$work/prep.log" || { cat "$work/prep.log"; fail "the dataset's tokenizer"; }
OMP_NUM_THREADS=2 "$parallm" train data.dir="$work/ds" train.out_dir="$work/run" model.n_layer=2 model.n_head=2 \
  model.n_embd=32 model.block_size=32 model.batch_size=8 train.max_iters=20 train.eval_interval=10 train.eval_iters=2 \
  train.sample_tokens=5 train.progress=false >"$work/run.log" 2>&1 || { tail "$work/run.log"; fail "train"; }
"$parallm" prepare shakespeare --input "$input" --out "$work/sub/sh" >"$work/net.log" 2>&1
if [ $? -eq 0 ]; then
  grep -q "tokenizer gpt2, vocab size 50257" "$work/net.log" || fail "fetched files that are not GPT-2's"
  echo "bpe_train: GPT-2's files were downloaded and checked"
else
  grep -q "No network? Pass GPT-2's tokenizer files with --vocab DIR" "$work/net.log" ||
    { cat "$work/net.log"; fail "the offline error does not say --vocab DIR"; }
  [ ! -e "$work/sub/sh/train.bin" ] || fail "a failed download left a dataset"
  echo "bpe_train: offline: $(grep -m1 'could not download' "$work/net.log")"
fi
echo "bpe_train: PASS"
