#!/usr/bin/env bash
# `parallm launch --restarts 1 --hostfile` over three emulated hosts (hosts.sh) with a job on two of them
# (2 ranks each, dp 2 x tp 2, dropout on, a checkpoint every 2 steps): host1's link is cut mid-run; the attempt
# ends (its ranks by comm.timeout_s, its launcher stopped by --linger), the failure names host1, and the restart
# runs without it, on host0 and host2 (dist info), from the last intact checkpoint, to the end: every step's loss
# and gradient norm equal the uninterrupted one-host run's bit for bit.
# Exits 77 (said) where namespaces cannot be made.
# Usage: restart_hosts.sh <parallm> <text file>
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
# shellcheck source=hosts.sh
. "$(dirname "$0")/hosts.sh"
parallm=$1
input=$2
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null || fail "prepare"
run=(model.n_layer=2 model.n_head=4 model.n_embd=32 model.block_size=32 model.batch_size=4 model.dropout=0.1
  model.vocab_size=67 train.max_iters=60 train.eval_interval=1000 train.final_eval=false train.progress=false
  train.sample_tokens=0 train.log_interval=1 train.checkpoint_interval=2 comm.timeout_s=5 "data.dir=$work/data"
  parallel.tp=2)
export OMP_NUM_THREADS=1 PARALLM_TRACE_DIR=$work  # the ranks' stack dumps, on a timeout
FAIL_LOG=$work/straight.txt
"$parallm" launch -n 4 -- "$parallm" train "${run[@]}" "train.out_dir=$work/straight" >"$FAIL_LOG" 2>&1 ||
  fail "the uninterrupted run"
step_records "$work/straight" >"$work/straight.steps"

hosts_up 3
FAIL_LOG=$work/cut.txt
out=$work/cut
on_host 0 "$parallm" launch -n 4 --hostfile "$hostfile" --restarts 1 --backoff 0 --linger 5 -- "$parallm" train \
  "${run[@]}" "train.out_dir=$out" >"$FAIL_LOG" 2>&1 &
job=$!
for ((w = 0; w < 600; w++)); do
  [ "0$(grep -c '"kind":"train"' "$out/metrics.jsonl" 2>/dev/null)" -ge 8 ] && break
  sleep 0.1
done
[ "0$(grep -c '"kind":"train"' "$out/metrics.jsonl" 2>/dev/null)" -ge 8 ] || fail "the job did not reach step 8"
cut_host 1
for ((w = 0; w < 1200; w++)); do
  kill -0 $job 2>/dev/null || break
  sleep 0.1
done
kill -0 $job 2>/dev/null && fail "the job still runs 120 s after host1 was cut"
wait $job || fail "the job ended $? after host1 was cut"
grep -q "on host host1 did not answer" "$FAIL_LOG" || fail "no error names host1"
grep -q "launch: attempt 1 of 2 ended.*; leaving out host host1" "$FAIL_LOG" || fail "the restart does not leave host1 out"
grep -q "launch: attempt 2 of 2 succeeded" "$FAIL_LOG" || fail "the restart did not succeed"
# The second attempt's dist info (the first one's says host0, host1).
sed -n '/launch: attempt 2 of 2/,$p' "$FAIL_LOG" >"$work/second.txt"
grep -q "dist: world size 4, 2 nodes, 2 ranks per node" "$work/second.txt" || fail "the restart's dist info: not 2 nodes"
grep -q "dist: hosts host0, host2" "$work/second.txt" || fail "the restart does not run on host0 and host2"
grep -q "resum" "$work/second.txt" || fail "the restart did not resume from a checkpoint"
step_records "$out" >"$work/cut.steps"
cmp -s "$work/straight.steps" "$work/cut.steps" ||
  fail "the losses differ from the uninterrupted run's: $(diff "$work/straight.steps" "$work/cut.steps" | head -4)"
echo "host1 cut; the restart resumed at $(grep -m1 -o "^iter [0-9]*" "$work/second.txt" || echo ?) on $(grep -m1 -o 'hosts host0, host2' "$work/second.txt"); $(grep -c . "$work/cut.steps") records bitwise the uninterrupted run's"
grep -E "^launch: (the launcher|attempt)" "$FAIL_LOG" | cut -c1-200
echo "restart_hosts: PASS"
