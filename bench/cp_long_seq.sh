#!/bin/bash
# Issue 36 acceptance (a measurement): the longest sequence that trains under a fixed activation cap at
# cp = 1, 2 and 4, and its tokens/s. For each cp (and kind): the longest model.block_size (a multiple of 64)
# whose activations `parallm plan` puts under the cap, then `parallm train` at that length for a few steps
# (mpirun, one thread a rank), its measured activation peak (rank 0's memory.json) and tokens/s (the mean
# of the steps after the first). Ratios against cp = 1 measured in the same run.
# usage: bench/cp_long_seq.sh [parallm] [cap MiB] [kinds] [out dir] [data dir]
#   (cap 48 MiB: about 3 minutes on 2 cores; cp = 4 there shares 2 cores between 4 ranks)
set -u
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
B=${1:-build/parallm}; CAP_MIB=${2:-48}; KINDS=${3:-"ring ulysses"}; O=${4:-out/cp_long_seq}
DATA=${5:-data/shakespeare_char}; rm -rf $O; mkdir -p $O
[ -d $DATA ] || $B prepare shakespeare_char --input ../shared/data/tinyshakespeare/input.txt --out $DATA >/dev/null
CAP=$((CAP_MIB * 1024 * 1024))
C="model.n_layer=4 model.n_head=8 model.n_embd=128 model.batch_size=1 model.dropout=0.1 train.threads=1 train.max_iters=4 train.eval_interval=1000 train.eval_iters=1 train.sample_tokens=0 train.peak_flops=1e11 train.log_interval=1 data.dir=$DATA train.progress=false"
# The planned activations (bytes) of cp=$1 kind $2 at T=$3.
planned() {
  $B plan $C parallel.cp=$1 parallel.cp_kind=$2 model.block_size=$3 2>/dev/null | python3 -c '
import sys
for line in sys.stdin:
    f = line.split()
    if len(f) > 9 and f[0] == "0" and f[1] == "*":
        print(int(float(f[8]) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[f[9]])); break'
}
echo "cp | kind    | longest T | T / cp=1 | planned activations | measured activations | tokens/s | tokens/s / cp=1"
for kind in $KINDS; do
  for cp in 1 2 4; do
    lo=64; hi=64
    while [ "$(planned $cp $kind $((hi * 2)))" -le $CAP ] 2>/dev/null; do hi=$((hi * 2)); done
    hi=$((hi * 2))  # lo fits, hi does not
    while [ $((hi - lo)) -gt 64 ]; do
      mid=$(((lo + hi) / 128 * 64))
      if [ "$(planned $cp $kind $mid)" -le $CAP ]; then lo=$mid; else hi=$mid; fi
    done
    T=$lo; run=$O/${kind}_cp$cp
    mpirun --oversubscribe --bind-to none -np $cp $B train $C comm.backend=mpi parallel.cp=$cp parallel.cp_kind=$kind \
      model.block_size=$T train.out_dir=$run > $run.log 2>&1 || { echo "FAILED cp=$cp $kind"; tail -3 $run.log; }
    python3 - $run $cp $kind $T "$(planned $cp $kind $T)" $O/base_$kind <<'PY'
import json, os, sys
run, cp, kind, T, plan, base = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
acts = json.load(open(f"{run}/memory.json"))["activations_bytes"]
steps = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if '"kind":"train"' in l]
tps = sum(s["tokens_per_s"] for s in steps[1:]) / max(len(steps) - 1, 1)
if cp == 1:
    json.dump({"T": T, "tps": tps}, open(base, "w"))
b = json.load(open(base))
print(f"{cp:2d} | {kind:7s} | {T:9d} | {T / b['T']:7.2f}x | {plan / 2**20:15.2f} MiB | {acts / 2**20:16.2f} MiB | "
      f"{tps:8.0f} | {tps / b['tps']:6.2f}x")
PY
  done
done
echo "cap: $CAP_MIB MiB of activations per rank; config: $C"
