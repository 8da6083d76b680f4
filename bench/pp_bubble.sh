#!/bin/bash
# Issue 33 acceptance (a measurement, not a timed test): the pipeline bubble measured on 2 ranks x 1 thread, for
# GPipe, 1F1B, interleaved (V=2) and ZB-H1 at m = 2, 4, 8, 16 micro-batches, beside the closed form and the
# simulator fed with the measured per-action costs (parallm pipeline --costs), and the simulator at p = 4 and 8
# with the same costs. The config's two stages cost about the same (2 blocks each; the head of a 65-token
# vocabulary is small). Idle fraction of a rank = 1 - its compute time / the longest stage's span of the step
# (the run's pp_idle metric): the median over steps 2..16 per rank, and the least idle step (the mean of the two
# ranks; other load on the machine only adds idle time, and this 2-core machine shows phases of it).
# usage: bench/pp_bubble.sh [parallm] [out dir] [data dir]   (about 2 minutes on 2 cores)
set -u
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
B=${1:-build/parallm}; O=${2:-out/pp_bubble}; DATA=${3:-data/shakespeare_char}; rm -rf $O; mkdir -p $O
[ -d $DATA ] || $B prepare shakespeare_char --input ../shared/data/tinyshakespeare/input.txt --out $DATA >/dev/null
C="model.n_layer=4 model.n_head=4 model.n_embd=128 model.block_size=128 model.batch_size=4 model.dropout=0.1 train.max_iters=16 train.eval_interval=1000 train.sample_tokens=0 train.peak_flops=1e11 data.dir=$DATA train.progress=false comm.backend=mpi parallel.pp=2"
for kind in gpipe 1f1b interleaved zb-h1; do
  V=""; [ $kind = interleaved ] && V="parallel.pp_virtual=2"
  for m in 2 4 8 16; do
    mpirun --oversubscribe --bind-to none -np 2 $B train $C parallel.pp_schedule=$kind $V optimizer.gas=$m \
      train.out_dir=$O/${kind}_$m > $O/${kind}_$m.log 2>&1 || { echo "FAILED ${kind}_$m"; tail -3 $O/${kind}_$m.log; }
  done
done
python3 - $O $B <<'PY'
import json, statistics, subprocess, sys
O, B = sys.argv[1], sys.argv[2]
def sim(p, m, kind, f, b, w):
    args = [B, "pipeline", "--pp", str(p), "--micro", str(m), "--schedule", kind, "--costs", f"{f:.4f},{b:.4f},{w:.4f}"]
    if kind == "interleaved": args += ["--virtual", "2"]
    out = subprocess.run(args, capture_output=True, text=True).stdout.splitlines()
    row = [l.split() for l in out if l.strip().startswith("0 ")][0]   # rank 0: busy idle idle% formula formula%
    return float(row[3].rstrip("%")), float(row[5].rstrip("%"))
print(f"{'schedule':12s} {'m':>3s} | {'median idle % rank 0, 1':>24s} | {'best step %':>11s} | {'formula %':>9s} | {'simulated %':>11s} | "
      f"{'costs ms f, b, w':>18s} | {'sim p=4 %':>9s} {'sim p=8 %':>9s}")
for kind in ["gpipe", "1f1b", "interleaved", "zb-h1"]:
    for m in [2, 4, 8, 16]:
        recs = [json.loads(l) for l in open(f"{O}/{kind}_{m}/metrics.jsonl")]
        recs = [r for r in recs if r.get("kind") == "train" and r["step"] >= 2]
        idle = [100 * statistics.median(r["pp_idle"][k] for r in recs) for k in range(2)]
        best = 100 * min((r["pp_idle"][0] + r["pp_idle"][1]) / 2 for r in recs)
        cost = [[statistics.median(r["pp_cost_ms"][4 * k + j] for r in recs) for j in range(4)] for k in range(2)]
        V = 2 if kind == "interleaved" else 1
        fwd = V * sum(c[0] for c in cost) / 2
        if kind == "zb-h1":
            b, w = V * sum(c[2] for c in cost) / 2, V * sum(c[3] for c in cost) / 2
        else:
            b, w = V * sum(c[1] for c in cost) / 2, 0.0
        simp, form = sim(2, m, kind, fwd, b, w)
        p4 = sim(4, m, kind, fwd, b, w)[0] if kind != "interleaved" or m % 4 == 0 else float("nan")
        p8 = sim(8, m, kind, fwd, b, w)[0] if kind != "interleaved" or m % 8 == 0 else float("nan")
        print(f"{kind:12s} {m:3d} | {idle[0]:11.1f} {idle[1]:12.1f} | {best:11.1f} | {form:9.1f} | {simp:11.1f} | "
              f"{fwd:5.2f} {b:5.2f} {w:5.2f} | {p4:9.1f} {p8:9.1f}")
PY
