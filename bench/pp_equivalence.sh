#!/bin/bash
# Issue 33 acceptance (a comparison, not a timed test): 100 steps of a small config (8 layers, vocabulary 65,
# dropout 0.1, optimizer.gas 4) at pp 2 and 4 with every schedule, pp 2 x tp 2, dp 2 x pp 2 with ZeRO-1 and
# dp 2 x tp 2 x pp 2 (8 ranks, oversubscribed) against one rank with the same global batch; then a
# dp 1 x tp 2 x pp 2 checkpoint (iteration 100, optimizer.gas 2) resumed at pp 4, at dp 4 and on one rank
# against the uninterrupted run.
# usage: bench/pp_equivalence.sh [parallm] [out dir] [data dir]   (about 4 minutes on 2 cores)
set -u
B=${1:-build/parallm}; O=${2:-out/pp_equivalence}; DATA=${3:-data/shakespeare_char}
C="model.n_layer=8 model.n_head=4 model.n_embd=64 model.block_size=64 model.dropout=0.1 train.eval_interval=50 train.eval_iters=5 train.peak_flops=1e11 train.sample_tokens=0 data.dir=$DATA train.progress=false train.log_interval=50"
. "$(dirname "$0")/equivalence_common.sh"
G="optimizer.gas=4 train.max_iters=100"
run 1 one model.batch_size=2 $G
for p in 2 4; do
  for kind in gpipe 1f1b zb-h1; do run $p pp${p}_$kind model.batch_size=2 $G parallel.pp=$p parallel.pp_schedule=$kind; done
  run $p pp${p}_interleaved model.batch_size=2 $G parallel.pp=$p parallel.pp_schedule=interleaved parallel.pp_virtual=2
done
run 4 pp2tp2 model.batch_size=2 $G parallel.pp=2 parallel.tp=2
run 4 dp2pp2z1 model.batch_size=1 $G parallel.pp=2 zero.stage=1
run 8 dp2tp2pp2 model.batch_size=1 $G parallel.pp=2 parallel.tp=2
python3 - $O <<PY
$LOSSES
vs_one([f"pp{p}_{k}" for p in (2,4) for k in ("gpipe","1f1b","interleaved","zb-h1")]+["pp2tp2","dp2pp2z1","dp2tp2pp2"], 100, 16)
PY
echo "== checkpoint at dp 1 x tp 2 x pp 2 (iteration 100, optimizer.gas 2), resumed for 20 steps"
R="optimizer.gas=2 train.always_save_checkpoint=true"
run 4 full model.batch_size=4 $R train.max_iters=120 parallel.tp=2 parallel.pp=2
run 4 part model.batch_size=4 $R train.max_iters=100 parallel.tp=2 parallel.pp=2
for v in pp4 dp4 one; do mkdir -p $O/res_$v; cp -r $O/part/ckpt $O/res_$v/; done
run 4 res_pp4 model.batch_size=4 $R train.max_iters=120 parallel.pp=4 train.init_from=resume
run 4 res_dp4 model.batch_size=1 $R train.max_iters=120 train.init_from=resume
run 1 res_one model.batch_size=4 $R train.max_iters=120 train.init_from=resume
python3 - $O <<PY
$LOSSES
vs_full(["res_pp4","res_dp4","res_one"], 100, 8)
PY
