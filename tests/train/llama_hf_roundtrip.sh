#!/usr/bin/env bash
# The Llama family end to end through the CLI: a BPE that `prepare bpe-train`
# wrote as tokenizer.json tokenizes a corpus (`prepare bpe --tokenizer`), a
# small Llama trains on it, `export --format hf`
# writes config.json, sharded safetensors and the tokenizer files, and
# `train.init_from=hf:` starts a run whose first evaluation equals the
# exported iteration's (the same weights and tokenizer, read back).
# Usage: llama_hf_roundtrip.sh <parallm> <tiny shakespeare input.txt>
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
head -c 300000 "$input" > "$work/input.txt"
"$parallm" prepare bpe-train --vocab_size 300 --input "$work/input.txt" --out "$work/bpe" >/dev/null 2>&1 || fail "bpe-train"
"$parallm" prepare bpe --tokenizer "$work/bpe/tokenizer.json" --input "$work/input.txt" --out "$work/data" \
  >/dev/null 2>&1 || fail "prepare bpe --tokenizer"
model="model.arch=llama model.n_layer=2 model.n_head=4 model.n_kv_head=2 model.n_embd=32 model.head_dim=8
       model.intermediate_size=48 model.block_size=32 model.batch_size=4 model.tie_embeddings=false
       model.rope_scaling=llama3 model.rope_original_max_position_embeddings=16 train.eval_iters=2
       train.sample_tokens=20 train.progress=false data.dir=$work/data"
# shellcheck disable=SC2086
OMP_NUM_THREADS=2 "$parallm" train $model train.max_iters=10 train.eval_interval=10 train.out_dir="$work/run" \
  > "$work/run.log" 2>&1 || { tail "$work/run.log"; fail "train"; }
"$parallm" export --format hf --ckpt "$work/run" --out "$work/hf" --max-shard-size 1 > "$work/export.log" 2>&1 ||
  { cat "$work/export.log"; fail "export"; }
for f in config.json tokenizer.json tokenizer_config.json; do [ -s "$work/hf/$f" ] || fail "the export has no $f"; done
# shellcheck disable=SC2086
OMP_NUM_THREADS=2 "$parallm" train $model train.init_from=hf:"$work/hf" train.max_iters=1 train.eval_interval=1 \
  train.out_dir="$work/ft" > "$work/ft.log" 2>&1 || { tail "$work/ft.log"; fail "train.init_from=hf"; }
exported=$(sed -n 's/^step 10: .*val loss \([0-9.]*\).*/\1/p' "$work/run.log")
loaded=$(sed -n 's/^step 0: .*val loss \([0-9.]*\).*/\1/p' "$work/ft.log")
[ -n "$exported" ] && [ "$exported" = "$loaded" ] || fail "val loss $loaded after init_from=hf, $exported when exported"
echo "llama_hf_roundtrip: val loss $exported exported, $loaded read back by train.init_from=hf"
echo "llama_hf_roundtrip: PASS"
