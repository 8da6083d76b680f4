#!/usr/bin/env bash
# Under Slurm across emulated hosts (hosts.sh, slurm.sh: three nodes, a slurmd in each host's namespaces):
#  1. srun -N 3 names host0, host1 and host2 (a multi-node Slurm);
#  2. `salloc -N 3 --no-kill parallm launch -n 4 --ppn 2 --restarts 1 -- parallm train ...` (dp 2 x tp 2,
#     dropout on, a checkpoint every 2 steps) runs on 2 of the 3 nodes (srun -N 2, one spare); host1's link is cut
#     mid-run; the attempt ends naming host1, the restart asks srun for 2 nodes without it (--exclude=host1), runs
#     on host0 and host2 (dist info) from the last intact checkpoint, and every step's loss and gradient norm equal
#     the uninterrupted run's bit for bit.
# Exits 77 (said) where namespaces cannot be made or Slurm cannot run.
# Usage: slurm_restart.sh <parallm> <text file>
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
# shellcheck source=hosts.sh
. "$(dirname "$0")/hosts.sh"
# shellcheck source=slurm.sh
. "$(dirname "$0")/slurm.sh"
parallm=$(readlink -f "$1")
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
slurm_up
FAIL_LOG=$work/srun.txt
on_host 0 srun -N 3 hostname >"$FAIL_LOG" 2>&1 || fail "srun -N 3"
[ "$(sort "$FAIL_LOG" | tr '\n' ' ')" = "host0 host1 host2 " ] || fail "srun -N 3 did not run on host0, host1, host2"
echo "Slurm $(sinfo --version | cut -d' ' -f2) over 3 emulated hosts: srun -N 3 ran on $(sort "$FAIL_LOG" | tr '\n' ' ')"

FAIL_LOG=$work/cut.txt
out=$work/cut
on_host 0 timeout 200 salloc -N 3 --ntasks-per-node=2 --no-kill "$parallm" launch -n 4 --ppn 2 --restarts 1 \
  --backoff 0 --linger 5 -- "$parallm" train "${run[@]}" "train.out_dir=$out" >"$FAIL_LOG" 2>&1 &
job=$!
for ((w = 0; w < 900; w++)); do
  [ "0$(grep -c '"kind":"train"' "$out/metrics.jsonl" 2>/dev/null)" -ge 8 ] && break
  sleep 0.1
done
[ "0$(grep -c '"kind":"train"' "$out/metrics.jsonl" 2>/dev/null)" -ge 8 ] || fail "the job did not reach step 8"
grep -q "dist: hosts host0, host1$" "$FAIL_LOG" || fail "the first attempt does not run on host0 and host1"
cut_host 1
for ((w = 0; w < 1200; w++)); do
  kill -0 $job 2>/dev/null || break
  sleep 0.1
done
kill -0 $job 2>/dev/null && fail "the job still runs 120 s after host1 was cut"
wait $job || fail "the job ended $? after host1 was cut"
grep -q "^launch: attempt 1 of 2: srun -n 4 --ntasks-per-node 2 --cpus-per-task 1 -N 2 " "$FAIL_LOG" ||
  fail "the first attempt does not ask srun for 2 of the 3 nodes"
grep -q "launch: attempt 1 of 2 ended.*; leaving out host host1" "$FAIL_LOG" || fail "the restart does not leave host1 out"
grep -q "^launch: attempt 2 of 2: srun .*-N 2 --overlap --exclude=host1 " "$FAIL_LOG" ||
  fail "the restart's srun does not ask for 2 nodes without host1"
grep -q "launch: attempt 2 of 2 succeeded" "$FAIL_LOG" || fail "the restart did not succeed"
sed -n '/launch: attempt 2 of 2/,$p' "$FAIL_LOG" >"$work/second.txt"
grep -q "dist: world size 4, 2 nodes, 2 ranks per node" "$work/second.txt" || fail "the restart's dist info: not 2 nodes"
grep -q "dist: hosts host0, host2" "$work/second.txt" || fail "the restart does not run on host0 and host2"
step_records "$out" >"$work/cut.steps"
cmp -s "$work/straight.steps" "$work/cut.steps" ||
  fail "the losses differ from the uninterrupted run's: $(diff "$work/straight.steps" "$work/cut.steps" | head -4)"
grep -E "^launch: (the launcher|attempt)" "$FAIL_LOG" | cut -c1-160
echo "host1 cut; the restart resumed at $(grep -m1 -o "^iter [0-9]*" "$work/second.txt" || echo ?) on $(grep -m1 -o 'hosts host0, host2' "$work/second.txt"); $(grep -c . "$work/cut.steps") records bitwise the uninterrupted run's"
echo "slurm_restart: PASS"
