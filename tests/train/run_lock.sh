#!/usr/bin/env bash
# One run at a time in a run directory (issue 44, B2): two scratch runs
# started 50 ms apart into one train.out_dir end with exactly one run, the
# other refused naming the process and host that hold the lock, and the
# winner's records whole; a resume started while a run trains is refused the
# same way; a lock file left by a killed run is taken over, said.
# Usage: run_lock.sh <parallm> <text file>
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
at_exit 'kill $(jobs -p) 2>/dev/null'
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null || fail "prepare"
run=(model.n_layer=2 model.n_head=2 model.n_embd=64 model.block_size=64 model.batch_size=8 train.eval_interval=50
  train.eval_iters=2 train.sample_tokens=0 train.progress=false train.peak_flops=1e11 train.threads=1
  train.checkpoint_interval=20 "data.dir=$work/data" "train.out_dir=$work/run")
export OMP_NUM_THREADS=1

# Two scratch runs 50 ms apart: one trains, the other is refused.
"$parallm" train "${run[@]}" train.max_iters=60 >"$work/a.txt" 2>&1 &
a=$!
sleep 0.05
"$parallm" train "${run[@]}" train.max_iters=60 >"$work/b.txt" 2>&1 &
b=$!
wait $a
rc_a=$?
wait $b
rc_b=$?
if [ $rc_a -eq 0 ] && [ $rc_b -ne 0 ]; then
  loser=$work/b.txt winner=$a
elif [ $rc_b -eq 0 ] && [ $rc_a -ne 0 ]; then
  loser=$work/a.txt winner=$b
else
  cat "$work/a.txt" "$work/b.txt"
  fail "two runs in one directory: exit codes $rc_a and $rc_b, expected one 0 and one refusal"
fi
grep -q "train.out_dir=$work/run is in use: process $winner on host $(hostname)" "$loser" ||
  { cat "$loser"; fail "the refusal does not name the process and host holding the lock"; }
[ -e "$work/run/run.lock" ] && fail "run.lock left behind by a finished run"
python3 -c '
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = [r["step"] for r in recs if r.get("kind") == "train"]
assert steps == list(range(61)), steps
' "$work/run/metrics.jsonl" || fail "metrics.jsonl is not one whole run"

# A resume while a run trains is refused, and changes nothing.
"$parallm" train "${run[@]}" train.init_from=resume train.max_iters=100000000 >"$work/c.txt" 2>&1 &  # killed below
c=$!
for _ in $(seq 200); do
  grep -q '"pid"' "$work/run/run.lock" 2>/dev/null && break
  sleep 0.05
done
timeout 60 "$parallm" train "${run[@]}" train.init_from=resume train.max_iters=500 >"$work/d.txt" 2>&1 &&
  fail "a resume while another run trains in the directory exited 0"
grep -q "is in use: process $c on host" "$work/d.txt" || { cat "$work/d.txt"; fail "the resume's refusal"; }
kill -9 $c
wait $c 2>/dev/null
# The killed run's lock file names a process that is gone: taken over, said.
grep -q "\"pid\":$c" "$work/run/run.lock" || fail "the killed run left no lock file (expected one naming $c)"
timeout 120 "$parallm" train "${run[@]}" train.init_from=resume train.max_iters=70 >"$work/e.txt" 2>&1 ||
  { cat "$work/e.txt"; fail "the resume after a killed run"; }
grep -q "taking over the lock of process $c on host" "$work/e.txt" || { cat "$work/e.txt"; fail "no take-over line"; }
echo "run_lock: PASS"
