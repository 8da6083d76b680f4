#!/bin/bash
# Issue 46 acceptance (a comparison, not a timed test): 200 steps of a small Llama (4 heads in 2 KV groups of 16,
# SwiGLU 96, llama3 rope scaling, untied, vocabulary 65, dropout 0.1) in each layout family against one rank with
# the same global batch: tp 2 (+ sp), tp 4 (KV heads replicated), pp 2 under 1F1B and ZB-H1, cp 2 ring and
# Ulysses, DDP 2, ZeRO 3, and Qwen3 (QK-norm, n_kv_head 4) at tp 2; a tp 2 checkpoint resumed at pp 2 and on one rank.
# usage: bench/llama_equivalence.sh [parallm] [out dir] [data dir]   (about a minute on 2 cores)
set -u
B=${1:-build/parallm}; O=${2:-out/llama_equivalence}; DATA=${3:-data/shakespeare_char}
C="model.arch=llama model.n_layer=4 model.n_head=4 model.n_kv_head=2 model.n_embd=64 model.head_dim=16
   model.intermediate_size=96 model.rope_scaling=llama3 model.rope_original_max_position_embeddings=32
   model.tie_embeddings=false model.block_size=64 model.dropout=0.1 train.eval_interval=50 train.eval_iters=5
   train.peak_flops=1e11 train.sample_tokens=0 data.dir=$DATA train.progress=false train.log_interval=50"
. "$(dirname "$0")/equivalence_common.sh"
run 1 one model.batch_size=8 train.max_iters=200
run 2 tp2 model.batch_size=8 train.max_iters=200 parallel.tp=2
run 2 tp2sp model.batch_size=8 train.max_iters=200 parallel.tp=2 parallel.sequence_parallel=true
run 4 tp4 model.batch_size=8 train.max_iters=200 parallel.tp=4
run 2 pp2_1f1b model.batch_size=8 train.max_iters=200 parallel.pp=2
run 2 pp2_zbh1 model.batch_size=8 train.max_iters=200 parallel.pp=2 parallel.pp_schedule=zb-h1
run 2 cp2_ring model.batch_size=8 train.max_iters=200 parallel.cp=2
run 2 cp2_ulysses model.batch_size=8 train.max_iters=200 parallel.cp=2 parallel.cp_kind=ulysses
run 2 ddp2 model.batch_size=4 train.max_iters=200
run 2 zero3 model.batch_size=4 train.max_iters=200 zero.stage=3
python3 - $O <<PY
$LOSSES
vs_one(["tp2","tp2sp","tp4","pp2_1f1b","pp2_zbh1","cp2_ring","cp2_ulysses","ddp2","zero3"], 200, 12)
PY
echo "== Qwen3 (QK-norm, n_kv_head 4) at tp 2"
Q="model.arch=qwen3 model.n_kv_head=4"
O1=$O; O=$O/qwen; mkdir -p $O
run 1 one $Q model.batch_size=8 train.max_iters=200
run 2 tp2 $Q model.batch_size=8 train.max_iters=200 parallel.tp=2
python3 - $O <<PY
$LOSSES
vs_one(["tp2"], 200, 12)
PY
O=$O1
echo "== checkpoint at tp 2 (iteration 100), resumed for 20 steps at pp 2 and on one rank"
run 2 full model.batch_size=8 train.max_iters=120 parallel.tp=2 train.always_save_checkpoint=true
run 2 part model.batch_size=8 train.max_iters=100 parallel.tp=2 train.always_save_checkpoint=true
for v in pp2 one; do mkdir -p $O/res_$v; cp -r $O/part/ckpt $O/res_$v/; done
run 2 res_pp2 model.batch_size=8 train.max_iters=120 parallel.tp=1 parallel.pp=2 train.init_from=resume
run 1 res_one model.batch_size=8 train.max_iters=120 parallel.tp=1 train.init_from=resume
python3 - $O <<PY
$LOSSES
vs_full(["res_pp2","res_one"], 100, 8)
PY
