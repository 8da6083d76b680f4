#!/bin/bash
# Stress for the stop signals (core/stop_signal.h): N times, a 2-rank CPU run
# gets SIGTERM (again every 10 ms until it exits) or SIGUSR1 at a random step
# on rank 1; every run must exit 0. Found the heap corruption a signal handler
# caused inside oneDNN's sgemm (4 of 60 runs aborted before the signal thread,
# 0 of 120 after). Run it with the cores busy (e.g. two `while :; do :; done`
# loops beside it): the failure needs a signal to land mid-computation.
# usage: tools/signal_stress.sh [parallm] [runs] [TERM|USR1] [text file]
set -u
p=${1:-build/parallm}; n=${2:-60}; sig=${3:-TERM}; text=${4:-../shared/data/tinyshakespeare/input.txt}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
w=$(mktemp -d)
trap 'pkill -KILL -f "$w/" 2>/dev/null; rm -rf "$w"' EXIT
"$p" prepare char --input "$text" --out "$w/data" >/dev/null || exit 1
count() {
  local c
  c=$(grep -c '"kind":"train"' "$w/run/metrics.jsonl" 2>/dev/null)
  echo "${c:-0}"
}
rank1() {
  for q in $(pgrep -f "train.out_dir=$w/run"); do
    [ "$(cat /proc/$q/comm 2>/dev/null)" = parallm ] || continue
    tr '\0' '\n' </proc/$q/environ 2>/dev/null | grep -qxE "(OMPI_COMM_WORLD_RANK|PMI_RANK)=1" && echo $q
  done
}
fails=0
for i in $(seq "$n"); do
  rm -rf "$w/run"
  mpiexec -n 2 --oversubscribe --allow-run-as-root "$p" train model.n_layer=2 model.n_head=2 model.n_embd=64 \
    model.block_size=64 model.batch_size=8 model.dropout=0.1 train.eval_interval=1000 train.eval_iters=2 \
    train.log_interval=1 train.sample_tokens=0 train.progress=false train.peak_flops=1e11 "data.dir=$w/data" \
    "train.out_dir=$w/run" train.max_iters=60 >"$w/log.txt" 2>&1 &
  job=$!
  want=$((3 + RANDOM % 8))
  for _ in $(seq 400); do [ "$(count)" -ge $want ] && break; sleep 0.02; done
  sleep "0.0$((RANDOM % 10))"
  pid=$(rank1)
  if [ "$sig" = TERM ]; then
    while kill -0 "$pid" 2>/dev/null; do kill -TERM "$pid" 2>/dev/null; sleep 0.01; done
  else
    kill "-$sig" "$pid"
  fi
  wait $job
  rc=$?
  if [ $rc != 0 ]; then
    fails=$((fails + 1))
    cp "$w/log.txt" "signal_stress_fail_$i.txt"
    echo "run $i: exit $rc (log in signal_stress_fail_$i.txt)"
  fi
done
echo "signal_stress: $fails of $n runs failed (SIG$sig)"
[ $fails = 0 ]
