#!/usr/bin/env bash
# `parallm launch --restarts 2` on a 2-rank job (DDP, dropout on):
#  1. TRIALS times, one rank's process SIGKILLed at a random step: the job
#     ends 0 and every step's loss equals the uninterrupted run's bit for bit
#     (the last record of each step: a restart retrains the steps after its
#     checkpoint);
#  2. a job that fails the same way every time (a rank killed at iteration 3
#     by PARALLM_FAULT_STOP_RANK in a pipeline) stops after 3 attempts with
#     each attempt's cause listed and a non-zero status;
#  3. train.init_from=auto (what a restart runs) starts a new directory from
#     scratch and resumes one holding a checkpoint.
# Usage: launch_restart.sh <parallm> <text file> [TRIALS=10]
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
trials=${3:-10}
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null || fail "prepare"
run=(model.n_layer=2 model.n_head=2 model.n_embd=32 model.block_size=32 model.batch_size=4 model.dropout=0.1
  train.max_iters=120 train.eval_interval=1000 train.final_eval=false train.progress=false train.sample_tokens=0
  train.log_interval=1 train.checkpoint_interval=2 "data.dir=$work/data")
FAIL_LOG=$work/straight.txt
"$parallm" launch -n 2 -- "$parallm" train "${run[@]}" "train.out_dir=$work/straight" >"$FAIL_LOG" 2>&1 ||
  fail "the uninterrupted run"
step_records "$work/straight" >"$work/straight.steps"
[ "$(grep -c '^train' "$work/straight.steps")" -eq 121 ] ||
  fail "the uninterrupted run has $(grep -c '^train' "$work/straight.steps") steps"

restarted=0
for ((k = 1; k <= trials; k++)); do
  FAIL_CONTEXT="trial $k"
  FAIL_LOG=$work/trial$k.txt
  out=$work/trial$k
  "$parallm" launch -n 2 --restarts 2 --backoff 0 -- "$parallm" train "${run[@]}" "train.out_dir=$out" >"$FAIL_LOG" 2>&1 &
  job=$!
  # A random step in [3, 100]: wait until the run has recorded it (the records are rank 0's, one a step).
  at=$((RANDOM % 98 + 3))
  for ((w = 0; w < 600; w++)); do
    [ "$(grep -c '"kind":"train"' "$out/metrics.jsonl" 2>/dev/null)" -ge "$at" ] && break
    sleep 0.05
  done
  # One of the ranks (not the launcher, not mpirun): the processes training into this trial's directory.
  victim=$(pgrep -f "train.out_dir=$out" | while read -r p; do
    [ "$(cat /proc/"$p"/comm 2>/dev/null)" = parallm ] && grep -q train /proc/"$p"/cmdline 2>/dev/null &&
      ! grep -q launch /proc/"$p"/cmdline && echo "$p"
  done | shuf -n 1)
  [ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null
  wait $job || fail "the job ended $? after rank process $victim was killed"
  grep -q "attempt 2 of 3 succeeded" "$FAIL_LOG" || fail "the kill at step $at (process $victim) did not restart the job"
  restarted=$((restarted + 1))
  step_records "$out" >"$work/trial$k.steps"
  cmp -s "$work/straight.steps" "$work/trial$k.steps" ||
    fail "the losses differ from the uninterrupted run's: $(diff "$work/straight.steps" "$work/trial$k.steps" | head -4)"
done
FAIL_CONTEXT=""
echo "restarts: $trials trials, each killed at a random step and restarted ($restarted); every run's losses bitwise the uninterrupted run's"

# The same failure every time.
FAIL_LOG=$work/always.txt
if PARALLM_FAULT_STOP_RANK=1:3:kill "$parallm" launch -n 2 --restarts 2 --backoff 0 -- "$parallm" train "${run[@]}" \
  parallel.pp=2 "train.out_dir=$work/always" >"$FAIL_LOG" 2>&1; then
  fail "a job failing every time ended 0"
fi
grep -q "the job failed 3 times" "$FAIL_LOG" || fail "no list of the 3 failures"
for a in 1 2 3; do grep -q "^  attempt $a: " "$FAIL_LOG" || fail "attempt $a's cause is not listed"; done
grep -A3 "the job failed 3 times" "$FAIL_LOG"

FAIL_LOG=$work/auto.txt
"$parallm" train "${run[@]}" train.max_iters=3 train.init_from=auto "train.out_dir=$work/auto" >"$FAIL_LOG" 2>&1 ||
  fail "init_from=auto in a new directory"
grep -q "train.init_from=auto: no checkpoint in train.out_dir: from scratch" "$FAIL_LOG" || fail "auto did not start over"
"$parallm" train "${run[@]}" train.max_iters=6 train.init_from=auto "train.out_dir=$work/auto" >"$FAIL_LOG" 2>&1 ||
  fail "init_from=auto over a checkpoint"
grep -q "train.init_from=auto: train.out_dir holds a checkpoint: resuming" "$FAIL_LOG" || fail "auto did not resume"
if ! grep -q "iter 4:" "$FAIL_LOG" || grep -q "iter 2:" "$FAIL_LOG"; then fail "the resume did not continue at 4"; fi
echo "launch_restart: PASS"
