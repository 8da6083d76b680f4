#!/bin/bash
# Issue 33 acceptance (a measurement): peak activation bytes per stage (the allocator's activations category,
# memory.jsonl's stage_activations_bytes) for GPipe and 1F1B at p = 4, m = 16, their ratio beside p/m, and
# parallm plan --stage r against each measured peak.
# usage: bench/pp_memory.sh [parallm] [out dir] [data dir]   (about 1 minute on 2 cores)
set -u
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
B=${1:-build/parallm}; O=${2:-out/pp_memory}; DATA=${3:-data/shakespeare_char}; rm -rf $O; mkdir -p $O
[ -d $DATA ] || $B prepare shakespeare_char --input ../shared/data/tinyshakespeare/input.txt --out $DATA >/dev/null
C="model.n_layer=8 model.n_head=4 model.n_embd=128 model.block_size=128 model.batch_size=2 model.dropout=0.1 optimizer.gas=16 parallel.pp=4 train.threads=1 train.max_iters=1 train.eval_interval=1000 train.sample_tokens=0 train.peak_flops=1e11 data.dir=$DATA train.progress=false"
for kind in gpipe 1f1b; do
  mpirun --oversubscribe --bind-to none -np 4 $B train $C comm.backend=mpi parallel.pp_schedule=$kind train.out_dir=$O/$kind > $O/$kind.log 2>&1 || { echo "FAILED $kind"; tail -3 $O/$kind.log; }
  for r in 0 1 2 3; do $B plan $C parallel.pp_schedule=$kind --stage $r > $O/plan_${kind}_$r.txt 2>&1; done
done
python3 - $O <<'PY'
import json, sys
O = sys.argv[1]
def measured(kind):
    return json.loads(open(f"{O}/{kind}/memory.json").read())["stage_activations_bytes"]
def planned(kind, r):
    for line in open(f"{O}/plan_{kind}_{r}.txt"):
        f = line.split()
        if f and f[0] == "0" and f[1] == "*":   # zero.stage 0 row: params grads optimizer activations ...
            v, u = float(f[8]), f[9]
            return v * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[u]
g, o = measured("gpipe"), measured("1f1b")
print("stage | gpipe activations | 1f1b activations | 1f1b/gpipe (<= p/m = 0.25) | plan 1f1b | plan/measured")
for r in range(4):
    p = planned("1f1b", r)
    print(f"{r:5d} | {g[r]:17d} | {o[r]:16d} | {o[r]/g[r]:26.4f} | {p:9.0f} | {p/o[r]:.4f}")
print("gpipe plan/measured:", " ".join(f"{planned('gpipe', r)/g[r]:.4f}" for r in range(4)))
PY
