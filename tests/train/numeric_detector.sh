#!/usr/bin/env bash
# The numeric detector (train.detect_anomaly) on 2 ranks:
#   inject: PARALLM_FAULT_SCALE multiplies h.3.mlp.c_fc.weight by 1e5 before
#     each step from iteration 2 on; the run must stop non-zero (not hang:
#     the failing rank aborts the job), naming layer h.3 and that tensor as the
#     first non-finite frame, on the rank that holds it, with the frames printed.
#   same: without a fault, a run with the detector on must be bitwise the run
#     with it off (every logged loss and gradient norm, and the checkpoint).
# Usage: numeric_detector.sh <parallm> <text file> <inject|same> <"layout keys"> <launcher for 2 ranks, flags>...
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
mode=$3
layout=$4
shift 4
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null || fail "prepare"
run() {  # run <out dir> <extra keys>...: the log in <out dir>.log, the exit code returned
  local out=$1
  shift
  OMP_NUM_THREADS=1 timeout 60 "${launcher[@]}" "$parallm" train model.n_layer=4 model.n_head=2 model.n_embd=32 \
    model.block_size=32 model.batch_size=4 optimizer.gas=2 model.dropout=0.1 train.max_iters=12 train.eval_interval=6 \
    train.eval_iters=2 train.sample_tokens=0 train.progress=false train.peak_flops=1e11 comm.timeout_s=10 \
    $layout "data.dir=$work/data" "train.out_dir=$out" "$@" >"$out.log" 2>&1
}
launcher=("$@")
if [ "$mode" = inject ]; then
  # A parameter the model does not have is refused, naming it, before anything is written.
  PARALLM_FAULT_SCALE=h.9.mlp.c_fc.weight:1e5:2 "$parallm" train model.n_layer=4 "data.dir=$work/data" \
    "train.out_dir=$work/bad" >"$work/bad.log" 2>&1 && fail "an unknown parameter was accepted"
  grep -q 'PARALLM_FAULT_SCALE: no parameter named "transformer.h.9.mlp.c_fc.weight"' "$work/bad.log" ||
    fail "the unknown parameter is not named: $(tail -1 "$work/bad.log")"
  [ ! -e "$work/bad" ] || fail "the refused run wrote $work/bad"
  PARALLM_FAULT_SCALE=h.3.mlp.c_fc.weight:1e5:2 run "$work/run" train.detect_anomaly=true
  rc=$?
  head -c 3000 "$work/run.log" | grep -A30 "numeric"
  [ $rc -ne 0 ] || fail "the run exited 0"
  [ $rc -ne 124 ] || fail "the run hung (killed by timeout after 60 s)"
  grep -qE "non-finite values first in layer h\.3 tensor \"mlp\.c_fc\.[a-z]+( output)?\" \(.*\) on rank [01], iteration [0-9]+, micro-batch [01], (forward|backward) pass" \
    "$work/run.log" || fail "the first non-finite frame does not name h.3 mlp.c_fc"
  grep -qE "abs min +abs max +inf +nan +iter.micro +layer +tensor" "$work/run.log" || fail "no frames printed"
  frames=$(grep -cE "^ +([0-9.e+-]+|-) +[0-9.e+-]+ +[0-9]+ +[0-9]+ +[0-9]+\.[0-9]+ (fwd|bwd) " "$work/run.log")
  [ "$frames" -ge 21 ] || fail "$frames frames printed, expected 21"
  echo "numeric_detector: PASS (inject, $layout: exit $rc, h.3 mlp.c_fc named, $frames frame lines)"
else
  run "$work/on" train.detect_anomaly=true || fail "the run with the detector exited $? ($(tail -3 "$work/on.log"))"
  run "$work/off" || fail "the run without the detector exited $? ($(tail -3 "$work/off.log"))"
  fields() { grep -oE '"(grad_norm|loss|train_loss|val_loss)":[^,}]+' "$1/metrics.jsonl"; }
  [ "$(fields "$work/on" | wc -l)" -ge 14 ] || fail "too few records in $work/on/metrics.jsonl"
  diff <(fields "$work/on") <(fields "$work/off") >/dev/null || fail "the losses differ with the detector on"
  n=0
  for f in $(cd "$work/off/ckpt" && find . -type f ! -name '*.json'); do
    cmp -s "$work/on/ckpt/$f" "$work/off/ckpt/$f" || fail "checkpoint file $f differs with the detector on"
    n=$((n + 1))
  done
  [ $n -gt 0 ] || fail "no checkpoint files to compare"
  echo "numeric_detector: PASS (same, $layout: losses, norms and $n checkpoint files bitwise equal)"
fi
