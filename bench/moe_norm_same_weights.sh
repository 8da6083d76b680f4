#!/bin/bash
# Issue 47 (a comparison, not a timed test): bench/moe_equivalence.sh's free-running layouts part from one
# rank's gradient norm by more than 1e-6 at a few steps (the norm's spikes). Here each layout takes each step from
# one rank's weights instead: one rank (the same small MoE Llama, 8 experts top-2, dropout 0.1, aux and z losses)
# saves a checkpoint after every step; each layout resumes one rank's checkpoint from before step s and takes
# step s alone; its gradient norm and loss against one rank's at s (bar 1e-6). What is left of the free-running
# difference is then the layout's own arithmetic at that step, not the trajectories' drift.
# usage: bench/moe_norm_same_weights.sh [parallm] [out dir] [data dir] [steps]
#   (the default 9 steps: 48 s on 2 cores; "$(seq 1 99)": every step, within 8 minutes)
set -u
B=${1:-build/parallm}; O=${2:-out/moe_norm_same}; DATA=${3:-data/shakespeare_char}
STEPS=${4:-"1 10 42 54 61 66 75 76 90"}
C="model.arch=llama model.n_layer=3 model.n_head=4 model.n_kv_head=2 model.n_embd=64 model.head_dim=16
   model.intermediate_size=96 model.moe_experts=8 model.moe_top_k=2 model.moe_intermediate_size=32
   model.moe_aux_coef=0.01 model.moe_z_coef=0.001 model.block_size=64 model.dropout=0.1 train.eval_interval=1000
   train.eval_iters=5 train.peak_flops=1e11 train.sample_tokens=0 data.dir=$DATA train.progress=false
   train.log_interval=50 train.final_eval=false"
. "$(dirname "$0")/equivalence_common.sh"
. "$(dirname "$0")/same_weights_common.sh"
run 1 one model.batch_size=8 train.max_iters=99 train.checkpoint_interval=1 train.keep_checkpoints=200
same_weights one "$STEPS" "ep2:2:model.batch_size=4,parallel.ep=2 ep4:4:model.batch_size=2,parallel.ep=4
 ep2_dp4:4:model.batch_size=2,parallel.ep=2 ep2_dp4_zero1:4:model.batch_size=2,parallel.ep=2,zero.stage=1
 ep2_dp4_zero3:4:model.batch_size=2,parallel.ep=2,zero.stage=3 ep2_tp2:4:model.batch_size=4,parallel.ep=2,parallel.tp=2
 ep2_pp2:4:model.batch_size=4,parallel.ep=2,parallel.pp=2 ep2_cp2:4:model.batch_size=4,parallel.ep=2,parallel.cp=2"
