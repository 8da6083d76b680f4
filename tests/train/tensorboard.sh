#!/usr/bin/env bash
# train.tensorboard=true: a short run's event files, read by an independent
# reader (tests/train/tb_check.py: its own CRC-32C and protobuf decoder), hold
# exactly the run's metrics.jsonl as scalars; a scratch run with
# train.overwrite=true removes the old run's event files.
# Usage: tensorboard.sh <parallm> <tiny shakespeare input.txt>
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null 2>&1 || fail "prepare"
train() {
  OMP_NUM_THREADS=2 "$parallm" train data.dir="$work/data" train.out_dir="$work/run" model.n_layer=2 model.n_head=2 \
    model.n_embd=32 model.block_size=32 model.batch_size=4 train.max_iters=12 train.eval_interval=5 train.eval_iters=2 \
    train.log_interval=1 train.sample_tokens=0 train.progress=false train.tensorboard=true train.loss_scale=dynamic "$@" >"$work/log.txt" 2>&1 ||
    { tail "$work/log.txt"; fail "train $*"; }
}
train
python3 "$(dirname "$0")/tb_check.py" "$work/run" || fail "the event files"
train train.overwrite=true
[ "$(ls "$work/run" | grep -c '^events.out.tfevents')" = 1 ] || fail "the old run's event file is still there"
python3 "$(dirname "$0")/tb_check.py" "$work/run" || fail "the event files after train.overwrite=true"
echo "tensorboard: PASS"
