# The job the restart tests cut (sourced by restart_hosts.sh and slurm_restart.sh after ../lib.sh and hosts.sh):
#   restart_job_setup PARALLM INPUT   prepares the data, sets `run` (dp 2 x tp 2 on 4 ranks, dropout on, vocabulary
#                                     67, a checkpoint every 2 steps, comm.timeout_s=5, 60 steps) and runs it
#                                     uninterrupted on this host into $work/straight.steps (every step's records)
#   restart_job_cut JOB OUT           waits for the job (pid JOB, run dir OUT, its output in $FAIL_LOG) to reach
#                                     step 8, cuts host1, waits at most 120 s for it to end, and checks it ended 0
#                                     after a restart that left host1 out and ran on host0 and host2 (dist info),
#                                     every step bitwise the uninterrupted run
# shellcheck shell=bash disable=SC2154
# ($work, fail, step_records and cut_host come from ../lib.sh and hosts.sh; `run` is for the sourcing test.)
restart_job_setup() {
  local parallm=$1 input=$2
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
}

restart_job_cut() {
  local job=$1 out=$2 w
  for ((w = 0; w < 900; w++)); do
    [ "0$(grep -c '"kind":"train"' "$out/metrics.jsonl" 2>/dev/null)" -ge 8 ] && break
    sleep 0.1
  done
  [ "0$(grep -c '"kind":"train"' "$out/metrics.jsonl" 2>/dev/null)" -ge 8 ] || fail "the job did not reach step 8"
  grep -q "dist: hosts host0, host1$" "$FAIL_LOG" || fail "the first attempt does not run on host0 and host1"
  cut_host 1
  for ((w = 0; w < 1200; w++)); do
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$job" 2>/dev/null && fail "the job still runs 120 s after host1 was cut"
  wait "$job" || fail "the job ended $? after host1 was cut"
  grep -q "launch: attempt 1 of 2 ended.*; leaving out host host1" "$FAIL_LOG" ||
    fail "the restart does not leave host1 out"
  grep -q "launch: attempt 2 of 2 succeeded" "$FAIL_LOG" || fail "the restart did not succeed"
  # The second attempt's dist info (the first one's says host0, host1).
  sed -n '/launch: attempt 2 of 2/,$p' "$FAIL_LOG" >"$work/second.txt"
  grep -q "dist: world size 4, 2 nodes, 2 ranks per node" "$work/second.txt" || fail "the restart's dist info: not 2 nodes"
  grep -q "dist: hosts host0, host2" "$work/second.txt" || fail "the restart does not run on host0 and host2"
  grep -q "resum" "$work/second.txt" || fail "the restart did not resume from a checkpoint"
  step_records "$out" >"$work/cut.steps"
  cmp -s "$work/straight.steps" "$work/cut.steps" ||
    fail "the losses differ from the uninterrupted run's: $(diff "$work/straight.steps" "$work/cut.steps" | head -4)"
  grep -E "^launch: (the launcher|attempt)" "$FAIL_LOG" | cut -c1-200
  echo "host1 cut; the restart resumed at $(grep -m1 -o "^iter [0-9]*" "$work/second.txt" || echo ?) on" \
    "$(grep -m1 -o 'hosts host0, host2' "$work/second.txt"); $(grep -c . "$work/cut.steps") records bitwise the" \
    "uninterrupted run's"
}
