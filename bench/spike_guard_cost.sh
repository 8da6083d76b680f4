#!/bin/bash
# Issue 34 item 8: the loss-spike guard's cost. nanoGPT's CPU config (configs/shakespeare_char_cpu.yaml, eval
# and samples off) on 2 ranks x 1 thread, 150 iterations, with the guard off and on (train.skip_loss_zscore=5
# train.skip_grad_zscore=5, the default window of 100: warm from iteration 100), in alternated pairs. Per run:
# the median step time (dt_ms) over iterations 110-150, where the guard judges every step (its windows'
# mean and deviation, and the broadcast of rank 0's loss and norm). Prints each pair's ratio on/off, the median
# ratio, the steps the guard skipped, and whether the two runs' losses are bitwise equal (they must be when
# nothing was skipped). Then one more guarded run with PARALLM_PROFILE=1: the guard's own time (the
# "spike_guard" scope: the broadcast and the judgement), summed over the run, against the summed step times,
# on rank 0 (a direct measure, immune to the load of other processes that the pairs' ratios see).
# usage: bench/spike_guard_cost.sh [parallm] [out dir] [data dir] [pairs=3]   (about 2 minutes on 2 cores)
set -u
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
B=${1:-build/parallm}; O=${2:-out/spike_guard_cost}; DATA=${3:-data/shakespeare_char}; PAIRS=${4:-3}
rm -rf $O; mkdir -p $O
[ -d $DATA ] || $B prepare shakespeare_char --input ../shared/data/tinyshakespeare/input.txt --out $DATA >/dev/null
C="configs/shakespeare_char_cpu.yaml train.max_iters=150 train.eval_interval=100000 train.final_eval=false
   train.sample_tokens=0 train.peak_flops=1e11 train.progress=false data.dir=$DATA comm.backend=mpi"
ON="train.skip_loss_zscore=5 train.skip_grad_zscore=5"
for ((k = 0; k < PAIRS; k++)); do
  for mode in off on; do
    G=""; [ $mode = on ] && G=$ON
    mpirun --oversubscribe --bind-to none -np 2 $B train $C $G train.out_dir=$O/${mode}_$k > $O/${mode}_$k.log 2>&1 ||
      { echo "FAILED ${mode}_$k"; tail -3 $O/${mode}_$k.log; exit 1; }
  done
done
PARALLM_PROFILE=1 mpirun --oversubscribe --bind-to none -np 2 $B train $C $ON train.out_dir=$O/profiled \
  > $O/profiled.log 2>&1 || { echo "FAILED profiled"; tail -3 $O/profiled.log; exit 1; }
python3 - $O $PAIRS <<'PY'
import json, re, statistics, sys
O, pairs = sys.argv[1], int(sys.argv[2])
def recs(run):
    return [r for r in map(json.loads, open(f"{O}/{run}/metrics.jsonl")) if r.get("kind") == "train"]
ratios = []
for k in range(pairs):
    off, on = recs(f"off_{k}"), recs(f"on_{k}")
    t = [statistics.median(r["dt_ms"] for r in x if r["step"] >= 110) for x in (off, on)]
    skipped = sum(1 for r in on if r.get("skipped"))
    same = [r["loss"] for r in off] == [r["loss"] for r in on]
    ratios.append(t[1] / t[0])
    print(f"pair {k}: median step {t[0]:.2f} ms off, {t[1]:.2f} ms on: ratio {t[1] / t[0]:.4f}; "
          f"guard skipped {skipped} steps; losses bitwise equal: {same}")
print(f"spike guard cost: median ratio on/off {statistics.median(ratios):.4f} over {pairs} pairs "
      f"({100 * (statistics.median(ratios) - 1):+.2f}%)")
row = [l.split() for l in open(f"{O}/profiled.log") if re.match(r"\s*spike_guard\s", l)][0]  # op calls ms share
steps = sum(r["dt_ms"] for r in recs("profiled"))
print(f"spike guard, profiled: {row[1]} calls, {float(row[2]):.2f} ms of {steps:.0f} ms of steps "
      f"({100 * float(row[2]) / steps:.3f}%, {1e3 * float(row[2]) / int(row[1]):.1f} us a step)")
PY
