#!/usr/bin/env bash
# Step-numbered checkpoints, the fallback on resume and the rollback, on 2
# ranks (issue 34, items 5 and 6). Every mode compares a run against a straight
# run of the same settings: the train losses of metrics.jsonl, step by step,
# must be the same bits.
#   flip      the newest step checkpoint's model.bin gets one byte flipped: the
#             resume (and parallm sample) says it skips it, takes the one
#             before, and continues bitwise from there.
#   truncate  the same with zero.stage=1, the newest checkpoint's shard file
#             cut short.
#   kill      SIGKILL of every rank at random moments during the saves of a
#             run saving at each step (train.keep_checkpoints=2): a random
#             time, then 0-9 ms after the next save's ckpt-*.tmp appears,
#             $kills times: after each, a resume must succeed, from the newest
#             intact checkpoint, and end with the straight run's losses.
#   rollback  train.resume_step=K train.skip_batches=a:b (K <= a): the "batch"
#             fields never hold a..b, steps K..a-1 are the straight run's, and
#             the batch sequence is the straight one without a..b.
# Usage: ckpt_fallback.sh <parallm> <text file> <mode> <launcher for 2 ranks with its flags>...
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
mode=$3
FAIL_CONTEXT=$mode
shift 3
launch=("$@")
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null || fail "prepare"
cfg=(model.n_layer=2 model.n_head=2 model.n_embd=64 model.block_size=32 model.batch_size=2 model.dropout=0.1
  train.eval_interval=100000 train.final_eval=false train.sample_tokens=0 train.progress=false train.log_interval=1
  train.peak_flops=1e11 comm.backend=mpi "data.dir=$work/data")
train() { # train <run dir> <log> key=value...
  local dir=$1 log=$2
  shift 2
  OMP_NUM_THREADS=1 "${launch[@]}" "$parallm" train "${cfg[@]}" "train.out_dir=$dir" "$@" >"$log" 2>&1
}
# "step loss" (or "step batch") of each train record, by step.
field() { grep '"kind":"train"' "$1/metrics.jsonl" | sed -E "s/.*\"$2\":([^,}]*).*\"step\":([0-9]+).*/\\2 \\1/" | sort -n; }
tree_of() { # the process ids under $1 (by parent id)
  local c
  for c in $(pgrep -P "$1"); do
    echo "$c"
    tree_of "$c"
  done
}
same_losses() { # the run's losses are the straight run's
  diff <(field "$1" loss) <(field "$work/straight" loss) >"$work/diff.txt" ||
    { head "$work/diff.txt"; fail "$2: the losses differ from the straight run's"; }
}

case $mode in
flip | truncate)
  extra=(train.checkpoint_interval=2 train.keep_checkpoints=3)
  [ "$mode" = truncate ] && extra+=(zero.stage=1)
  train "$work/straight" "$work/straight.log" "${extra[@]}" train.max_iters=12 || fail "the straight run"
  # Every second one, and the state after the last iteration (13).
  [ -d "$work/straight/ckpt-00000013" ] && [ -d "$work/straight/ckpt-00000012" ] && [ -d "$work/straight/ckpt-00000010" ] ||
    fail "the step checkpoints 10, 12, 13 are not all there: $(ls "$work/straight")"
  [ -d "$work/straight/ckpt-00000008" ] && fail "ckpt-00000008 was kept beyond train.keep_checkpoints=3"
  train "$work/part" "$work/part.log" "${extra[@]}" train.max_iters=9 || fail "the part run"
  newest="$work/part/ckpt-00000010"
  if [ "$mode" = flip ]; then
    file="$newest/model.bin"
    byte=$(od -An -tu1 -j 1000 -N 1 "$file" | tr -d ' ')
    printf "$(printf '\\%03o' $(((byte + 1) % 256)))" | dd of="$file" bs=1 seek=1000 conv=notrunc status=none
  else
    file="$newest/shard-00001-of-00002.bin"
    truncate -s 100 "$file"
  fi
  # parallm sample (no best ckpt/ here) falls back the same way.
  "$parallm" sample --ckpt "$work/part" --max_new_tokens 5 >"$work/sample.log" 2>&1 ||
    { tail "$work/sample.log"; fail "sample from the damaged run directory"; }
  grep -q "skipping $newest" "$work/sample.log" || fail "sample did not say it skips $newest"
  train "$work/part" "$work/resume.log" "${extra[@]}" train.init_from=resume train.max_iters=12 ||
    { tail "$work/resume.log"; fail "the resume"; }
  grep -q "skipping $newest: .*$(basename "$file")" "$work/resume.log" ||
    { tail "$work/resume.log"; fail "no line says $newest is skipped, naming $(basename "$file")"; }
  grep -q "resuming from $work/part/ckpt-00000008 at iter 8" "$work/resume.log" ||
    { tail "$work/resume.log"; fail "the resume did not take ckpt-00000008"; }
  same_losses "$work/part" "resumed from ckpt-00000008"
  echo "ckpt_fallback: PASS ($mode: $(basename "$file") of ckpt-00000010 damaged, skipped, resumed bitwise from 8)"
  ;;
kill)
  kills=${KILLS:-10}
  extra=(model.n_embd=128 train.checkpoint_interval=1 train.keep_checkpoints=2)
  iters=30
  train "$work/straight" "$work/straight.log" "${extra[@]}" train.max_iters=$iters || fail "the straight run"
  in_save=0 resumed=0
  for ((k = 1; k <= kills; k++)); do
    run="$work/k$k"
    train "$run" "$work/killed.log" "${extra[@]}" train.max_iters=$iters &
    pid=$!
    sleep "$((RANDOM % 2)).$((RANDOM % 10))$((RANDOM % 10))"
    sleep 0.5
    # Then into the next save: once its ckpt-*.tmp appears, 0-9 ms later.
    for _ in $(seq 400); do
      compgen -G "$run/ckpt-*.tmp" >/dev/null && break
      kill -0 $pid 2>/dev/null || break
      sleep 0.005
    done
    sleep "0.00$((RANDOM % 10))"
    # Every rank at once, as a lost node: the launcher and every process under it.
    kill -KILL $(tree_of $pid) 2>/dev/null
    wait $pid 2>/dev/null || true
    compgen -G "$run/ckpt*.tmp" >/dev/null && in_save=$((in_save + 1))
    # Killed before its first save was complete (at most a ckpt-*.tmp): nothing to resume.
    ls -d "$run"/ckpt-* 2>/dev/null | grep -qv '\.tmp$' || continue
    train "$run" "$work/resume.log" "${extra[@]}" train.init_from=resume train.max_iters=$iters ||
      { tail "$work/resume.log"; fail "kill $k: the resume failed"; }
    from=$(grep -o "resuming from [^ ]*" "$work/resume.log")
    [ -n "$from" ] && resumed=$((resumed + 1))
    [ -n "$from" ] || grep -q "nothing to do" "$work/resume.log" || fail "kill $k: no resume line"
    same_losses "$run" "kill $k ($from)"
    rm -rf "$run"
  done
  echo "ckpt_fallback: PASS (kill: $kills kills, $in_save inside a save, $resumed resumed, each bitwise)"
  ;;
rollback)
  extra=(train.checkpoint_interval=4 train.keep_checkpoints=5)
  train "$work/straight" "$work/straight.log" "${extra[@]}" train.max_iters=20 || fail "the straight run"
  cp -r "$work/straight" "$work/roll"
  train "$work/roll" "$work/roll.log" "${extra[@]}" train.init_from=resume train.resume_step=8 \
    train.skip_batches=10:12 train.max_iters=20 || { tail "$work/roll.log"; fail "the rollback"; }
  grep -q "resuming from $work/roll/ckpt-00000008 at iter 8" "$work/roll.log" || fail "not resumed from ckpt-00000008"
  [ -d "$work/roll/rolled_back/ckpt-00000020" ] || fail "the newer checkpoints were not moved to rolled_back/"
  field "$work/roll" batch >"$work/batches.txt"
  awk '$2 >= 10 && $2 <= 12 { bad = 1 } END { exit bad }' "$work/batches.txt" ||
    fail "a skipped batch was fed: $(tr '\n' ' ' <"$work/batches.txt")"
  # Steps 0..9 are the straight run's (batches 0..9); from step 10 on, batches 13, 14, ... in order.
  diff <(field "$work/roll" loss | head -10) <(field "$work/straight" loss | head -10) >/dev/null ||
    fail "steps before the skipped range differ from the straight run's"
  diff <(awk '{print $2}' "$work/batches.txt") <(seq 0 9; seq 13 23) >/dev/null ||
    fail "batches $(awk '{print $2}' "$work/batches.txt" | tr '\n' ' ') are not 0..9, 13..23"
  # A later resume keeps skipping: the checkpoint's config holds the ranges.
  train "$work/roll" "$work/again.log" train.init_from=resume train.max_iters=22 || fail "the resume after"
  [ "$(field "$work/roll" batch | tail -1)" = "22 25" ] || fail "after a further resume, step 22 read $(field "$work/roll" batch | tail -1)"
  echo "ckpt_fallback: PASS (rollback to 8 skipping 10:12: batches 0..9, 13..25, steps 8..9 bitwise)"
  ;;
*) fail "unknown mode" ;;
esac
