#!/bin/bash
# Issue 48 (a comparison, not a timed test): FP8 (emulated) and fp16 runs in tp 2, pp 2, cp 2, DDP and ZeRO 3
# part from one rank's losses by up to ~1e-3 (FP8) and ~1.5e-5 (fp16) over 50 steps (tests/parallel/
# test_fp8_train.cpp, test_f16_train.cpp). Here each layout takes every step from one rank's weights instead:
# one rank (the tests' tiny GPT-2: 2 layers, width 32, dropout 0.1, vocabulary 65, gas 2) saves a checkpoint
# after every step; each layout resumes one rank's checkpoint from before step s and takes step s alone; its train
# loss and gradient norm against one rank's at s. What remains is the layout's own arithmetic at one step; the
# free-running difference is that, compounded over the steps and magnified by the low precision's rounding.
# usage: bench/lowp_same_weights.sh [parallm] [out dir] [data dir] [steps]   (every step 1-49: within 4 min on 2 cores)
set -u
B=${1:-build/parallm}; O=${2:-out/lowp_same}; DATA=${3:-data/shakespeare_char}; STEPS=${4:-$(seq 1 49)}
C="model.n_layer=2 model.n_head=2 model.n_embd=32 model.block_size=32 model.dropout=0.1 train.eval_interval=1000
   train.eval_iters=2 train.log_interval=100 train.sample_tokens=0 train.progress=false train.peak_flops=1e11
   optimizer.learning_rate=3e-3 optimizer.warmup_iters=3 optimizer.lr_decay_iters=49 optimizer.gas=2
   train.final_eval=false data.dir=$DATA"
. "$(dirname "$0")/equivalence_common.sh"
. "$(dirname "$0")/same_weights_common.sh"
SAVE="train.max_iters=49 train.checkpoint_interval=1 train.keep_checkpoints=100"
for dt in "fp8 train.dtype=fp8 train.fp8_bf16_ends=false" "fp16 train.dtype=fp16"; do
  set -- $dt
  tag=$1 && shift
  echo "== $tag: tp 2, pp 2, cp 2 against one rank at batch 2; DDP and ZeRO 3 (2 x 2) against one rank at batch 4"
  run 1 ${tag}_one2 model.batch_size=2 "$@" $SAVE
  run 1 ${tag}_one4 model.batch_size=4 "$@" $SAVE
  K=$(echo "$@" | tr ' ' ',')
  same_weights ${tag}_one2 "$STEPS" "${tag}_tp2:2:model.batch_size=2,parallel.tp=2,$K
    ${tag}_pp2:2:model.batch_size=2,parallel.pp=2,$K ${tag}_cp2:2:model.batch_size=2,parallel.cp=2,$K"
  same_weights ${tag}_one4 "$STEPS" "${tag}_ddp:2:model.batch_size=2,$K ${tag}_zero3:2:model.batch_size=2,zero.stage=3,$K"
done
