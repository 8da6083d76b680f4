#!/usr/bin/env bash
# train.async_save against synchronous saving, measured in one run of this
# script: baby GPT's shape (configs/baby_gpt.yaml, 10.7M parameters: 128 MB of
# checkpoint state), a small batch so saves weigh, a step-numbered checkpoint
# every EVERY steps. Prints each mode's save times as the log states them
# (synchronous: the whole save; background: what the step waited for the
# staging copy) and their ratio, and the runs' wall times.
# Usage: bench/async_save.sh <parallm> <data dir> [STEPS=24] [EVERY=4]
set -euo pipefail
parallm=$1
data=$2
steps=${3:-24}
every=${4:-4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run=(configs/baby_gpt.yaml model.batch_size=2 train.eval_interval=100000 train.sample_tokens=0 train.progress=false
  train.log_interval=100000 "train.max_iters=$steps" "train.checkpoint_interval=$every" train.keep_checkpoints=2
  "data.dir=$data")
declare -A mean wall
for mode in false true; do
  start=$(date +%s.%N)
  "$parallm" train "${run[@]}" "train.async_save=$mode" "train.out_dir=$work/$mode" >"$work/$mode.txt" 2>&1
  wall[$mode]=$(echo "$(date +%s.%N) - $start" | bc)
  if [ $mode = false ]; then
    times=$(grep -o 'saved checkpoint to [^ ]*ckpt-[0-9]* in [0-9.]* s' "$work/$mode.txt" | awk '{print $(NF-1)}')
  else
    times=$(grep -o 'training waited [0-9.]* s' "$work/$mode.txt" | awk '{print $3}')
  fi
  mean[$mode]=$(echo "$times" | awk '{s += $1; n++} END {printf "%.4f", s / n}')
  echo "async_save=$mode: $(echo "$times" | wc -l) periodic saves, seconds each: $(echo "$times" | tr '\n' ' ')(mean ${mean[$mode]}); run ${wall[$mode]} s"
done
echo "stall per save: background $(echo "${mean[true]} / ${mean[false]} * 100" | bc -l | xargs printf '%.1f')% of a synchronous save"
