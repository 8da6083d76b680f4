#!/usr/bin/env bash
# SIGKILL during checkpoint saves never damages the last good checkpoint: a
# run saving at every step (a model large enough that a save takes a while)
# is killed at random moments N times; after each kill the checkpoint must
# pass its checksums (an eval-only resume verifies every file) and the run
# must resume. Prints how many kills landed inside a save (ckpt.tmp present).
# Usage: kill_during_save.sh <parallm> <text file> [kills=3]
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
kills=${3:-3}
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null || fail "prepare"
run=(model.n_layer=4 model.n_head=4 model.n_embd=256 model.block_size=32 model.batch_size=2 train.eval_iters=1
  train.eval_interval=1 train.always_save_checkpoint=true train.progress=false train.sample_tokens=0
  train.log_interval=1 train.peak_flops=1e11 "data.dir=$work/data" "train.out_dir=$work/run")
"$parallm" train "${run[@]}" train.max_iters=2 >/dev/null || fail "the first run"
in_save=0
for ((k = 1; k <= kills; k++)); do
  "$parallm" train "${run[@]}" train.init_from=resume train.max_iters=100000 >"$work/log.txt" 2>&1 &
  pid=$!
  sleep "0.$((RANDOM % 9 + 1))$((RANDOM % 10))"
  sleep 1
  kill -KILL $pid
  wait $pid 2>/dev/null
  [ -d "$work/run/ckpt.tmp" ] && in_save=$((in_save + 1))
  "$parallm" train "${run[@]}" train.init_from=resume train.eval_only=true >"$work/check.txt" 2>&1 ||
    { cat "$work/check.txt"; fail "after kill $k the checkpoint does not load"; }
done
echo "kill_during_save: PASS ($kills kills, $in_save inside a save)"
