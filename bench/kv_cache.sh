#!/usr/bin/env bash
# Generation's tokens/s with and without the KV cache (model/kv_cache.h) on
# one run: configs/llama_tiny_cpu.yaml's model (and GPT-2's CPU config) with
# a 512-token context, trained one iteration, sampling 400 tokens at
# temperature 0 from a one-token prompt; the ids must be the same both ways.
#   bench/kv_cache.sh [BUILD_DIR]     (from the repository root; data/shakespeare_char prepared)
set -euo pipefail
B=${1:-build}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
printf '| model | tokens | KV cache tokens/s | recomputed tokens/s | ratio | same ids |\n| --- | --- | --- | --- | --- | --- |\n'
for cfg in configs/llama_tiny_cpu.yaml configs/shakespeare_char_cpu.yaml; do
  name=$(basename "$cfg" .yaml)
  "$B/parallm" train "$cfg" model.block_size=512 train.max_iters=1 train.eval_interval=1 train.eval_iters=1 \
    train.sample_tokens=0 train.progress=false train.out_dir="$W/$name" > "$W/$name.train.log" 2>&1
  for kv in cache none; do
    flag=$([ $kv = none ] && echo --no-kv-cache || true)
    "$B/parallm" sample --ckpt "$W/$name" --prompt "R" --temperature 0 --max_new_tokens 400 $flag \
      > "$W/$name.$kv.txt" 2> "$W/$name.$kv.err"
  done
  rate() { sed -n 's/.*(\([0-9.]*\) tokens\/s.*/\1/p' "$1" | tail -1; }
  c=$(rate "$W/$name.cache.err")
  n=$(rate "$W/$name.none.err")
  same=$(cmp -s "$W/$name.cache.txt" "$W/$name.none.txt" && echo yes || echo NO)
  ratio=$(python3 -c "print(f'{$c / $n:.1f}x')")
  printf '| %s | 400 | %s | %s | %s | %s |\n' "$name" "$c" "$n" "$ratio" "$same"
done
