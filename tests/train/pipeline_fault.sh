#!/usr/bin/env bash
# A pipeline stage that dies (SIGKILL) or hangs (SIGSTOP) halfway through a
# step's actions must end the whole job, non-zero, within comm.timeout_s + 20
# seconds of its start (4 ranks' start-up and 3 steps included: an ASan
# build under load measured 12.7 s of them), with the culprit (world rank 2 of
# 4, pp=4) named: no rank is left waiting in a receive (a hang runs to 60 s).
# Usage: pipeline_fault.sh <parallm> <text file> <kill|stop> <launcher for 4 ranks with its flags>...
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
sig=$3
shift 3
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null || fail "prepare"
timeout_s=5
start=$(date +%s)
PARALLM_FAULT_STOP_RANK="2:3:$sig" PARALLM_TRACE_DIR="$work" OMP_NUM_THREADS=1 timeout 60 "$@" "$parallm" train \
  model.n_layer=4 model.n_head=2 model.n_embd=32 model.block_size=32 model.batch_size=2 optimizer.gas=4 \
  parallel.pp=4 train.max_iters=50 train.eval_interval=1000 train.sample_tokens=0 train.progress=false \
  train.peak_flops=1e11 comm.timeout_s=$timeout_s "data.dir=$work/data" "train.out_dir=$work/run" >"$work/log.txt" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
tail -5 "$work/log.txt"
[ $rc -ne 0 ] || fail "the job exited 0"
[ $rc -ne 124 ] || fail "the job hung (killed by timeout after 60 s)"
[ $elapsed -le $((timeout_s + 20)) ] || fail "the job took ${elapsed} s (more than comm.timeout_s + 20)"
grep -qE "rank 2 .*(exited on signal|did not answer|Killed)|process rank 2|Killed \(signal 9\)" "$work/log.txt" ||
  fail "rank 2 is not named"
echo "pipeline_fault: PASS ($sig: exit $rc after ${elapsed} s, rank 2 named)"
