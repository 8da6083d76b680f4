#!/bin/bash
# Issue 32 acceptance (a comparison, not a timed test): 200 steps of a small config (vocabulary 65, dropout 0.1)
# at tp 2, tp 4, tp 2 + sp, dp 2 x tp 2 with ZeRO 1 and 3 against one rank with the same global batch, and a
# dp 2 x tp 2 ZeRO-1 checkpoint resumed at tp 4, dp 4 and on one rank against the uninterrupted run.
# usage: bench/tp_equivalence.sh [parallm] [out dir] [data dir]   (about 6 minutes on 2 cores)
set -u
B=${1:-build/parallm}; O=${2:-out/tp_equivalence}; DATA=${3:-data/shakespeare_char}
C="model.n_layer=2 model.n_head=4 model.n_embd=64 model.block_size=64 model.dropout=0.1 train.eval_interval=50 train.eval_iters=5 train.peak_flops=1e11 train.sample_tokens=0 data.dir=$DATA train.progress=false train.log_interval=50"
. "$(dirname "$0")/equivalence_common.sh"
run 1 one model.batch_size=8 train.max_iters=200
run 2 tp2 model.batch_size=8 train.max_iters=200 parallel.tp=2
run 4 tp4 model.batch_size=8 train.max_iters=200 parallel.tp=4
run 2 tp2sp model.batch_size=8 train.max_iters=200 parallel.tp=2 parallel.sequence_parallel=true
run 4 dp2tp2z1 model.batch_size=4 train.max_iters=200 parallel.tp=2 zero.stage=1
run 4 dp2tp2z3 model.batch_size=4 train.max_iters=200 parallel.tp=2 zero.stage=3
python3 - $O <<PY
$LOSSES
vs_one(["tp2","tp4","tp2sp","dp2tp2z1","dp2tp2z3"], 200, 10)
PY
echo "== checkpoint at dp2 x tp2 ZeRO 1 (iteration 100), resumed for 20 steps"
run 4 full model.batch_size=4 train.max_iters=120 parallel.tp=2 zero.stage=1 train.always_save_checkpoint=true
run 4 part model.batch_size=4 train.max_iters=100 parallel.tp=2 zero.stage=1 train.always_save_checkpoint=true
for v in tp4 dp4 one; do mkdir -p $O/res_$v; cp -r $O/part/ckpt $O/res_$v/; done
run 4 res_tp4 model.batch_size=8 train.max_iters=120 parallel.tp=4 zero.stage=1 train.init_from=resume
run 4 res_dp4 model.batch_size=2 train.max_iters=120 zero.stage=1 train.init_from=resume
run 1 res_one model.batch_size=8 train.max_iters=120 zero.stage=0 train.init_from=resume
python3 - $O <<PY
$LOSSES
vs_full(["res_tp4","res_dp4","res_one"], 100, 8)
PY
