#!/usr/bin/env bash
# train.async_save (checkpoints written by a background thread):
#  1. the same run saving in the background and synchronously writes the same
#     checkpoint files bit for bit and the same losses (one rank, and with
#     MPI two ranks under ZeRO 2, whose ranks each write a shard);
#  2. SIGKILL while a background write is in flight (PARALLM_FAULT_SLOW_SAVE
#     holds it open), KILLS times at random moments: the newest complete
#     checkpoint passes its checksums (an eval-only resume reads every file);
#  3. a checkpoint larger than the free space (a 1 MiB tmpfs, where this user
#     may mount one; said where not): the run stops before writing, naming
#     both numbers, with no partial directory left.
# Usage: async_save.sh <parallm> <text file> [KILLS=20] [MPI=mpiexec command, optional]
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
kills=${3:-20}
mpi=${4:-}
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null || fail "prepare"
base=(model.n_layer=2 model.n_head=2 model.n_embd=32 model.block_size=32 model.batch_size=4 model.dropout=0.1
  train.eval_iters=1 train.eval_interval=4 train.progress=false train.sample_tokens=0 train.log_interval=1
  train.checkpoint_interval=3 train.keep_checkpoints=100 train.always_save_checkpoint=true "data.dir=$work/data")

same_runs() {  # $1 $2: run directories with the same checkpoints, file for file, and the same losses
  local d n=0 f
  for d in "$1"/ckpt*; do
    [ -f "$d/state.json" ] || continue
    for f in "$d"/*.bin; do
      cmp -s "$f" "$2/$(basename "$d")/$(basename "$f")" || fail "$(basename "$d")/$(basename "$f") differs"
      n=$((n + 1))
    done
  done
  [ "$n" -ge 4 ] || fail "only $n checkpoint files compared"
  [ "$(step_records "$1")" = "$(step_records "$2")" ] || fail "the losses differ"
  echo "  $n checkpoint files and $(step_records "$1" | wc -l) records' losses and gradient norms the same"
}

# 1. Background saves equal synchronous ones.
for a in false true; do
  FAIL_LOG=$work/one_$a.txt
  "$parallm" train "${base[@]}" train.max_iters=13 train.async_save=$a "train.out_dir=$work/one_$a" >"$FAIL_LOG" 2>&1 ||
    fail "one rank, async_save=$a"
done
grep -q "written in the background" "$work/one_true.txt" || fail "no save was written in the background"
echo "one rank:"
same_runs "$work/one_false" "$work/one_true"
if [ -n "$mpi" ]; then
  for a in false true; do
    FAIL_LOG=$work/zero_$a.txt
    # shellcheck disable=SC2086
    $mpi -n 2 "$parallm" train "${base[@]}" zero.stage=2 train.max_iters=13 train.async_save=$a \
      "train.out_dir=$work/zero_$a" >"$FAIL_LOG" 2>&1 || fail "two ranks, ZeRO 2, async_save=$a"
  done
  ls "$work/zero_true/ckpt"/shard-00001-of-00002.bin >/dev/null || fail "no shard of rank 1"
  echo "two ranks, ZeRO 2:"
  same_runs "$work/zero_false" "$work/zero_true"
fi

# 2. SIGKILL during background writes.
FAIL_LOG=""
big=(model.n_layer=4 model.n_head=4 model.n_embd=128 model.block_size=32 model.batch_size=2 train.eval_iters=1
  train.eval_interval=100000 train.progress=false train.sample_tokens=0 train.log_interval=1 train.async_save=true
  train.checkpoint_interval=1 train.keep_checkpoints=2 "data.dir=$work/data" "train.out_dir=$work/kill")
"$parallm" train "${big[@]}" train.max_iters=2 >/dev/null 2>&1 || fail "the first run to kill"
in_write=0
for ((k = 1; k <= kills; k++)); do
  PARALLM_FAULT_SLOW_SAVE=$((RANDOM % 150 + 50)) "$parallm" train "${big[@]}" train.init_from=resume \
    train.max_iters=100000 >"$work/killed.txt" 2>&1 &
  pid=$!
  sleep "0.$((RANDOM % 9 + 1))$((RANDOM % 10))"
  sleep 0.5
  kill -KILL $pid
  wait $pid 2>/dev/null
  compgen -G "$work/kill/ckpt-*.tmp" >/dev/null && in_write=$((in_write + 1))
  "$parallm" train "${big[@]}" train.init_from=resume train.eval_only=true >"$work/check.txt" 2>&1 ||
    { cat "$work/check.txt"; fail "after kill $k the newest complete checkpoint does not load"; }
done
[ "$in_write" -gt 0 ] || fail "no kill landed while a background write was in flight"
echo "SIGKILL: $kills kills, $in_write while a background write was in flight; every time the newest checkpoint loaded"

# 3. Too little free space: refused before writing.
mnt=$work/disk
mkdir -p "$mnt"
if ! mount -t tmpfs -o size=1m tmpfs "$mnt" 2>/dev/null; then
  echo "async_save: PASS (the free-space check SKIPPED: this user cannot mount a tmpfs)"
  exit 0
fi
at_exit 'umount "$mnt" 2>/dev/null'
FAIL_LOG=$work/disk.txt
if "$parallm" train "${big[@]}" train.max_iters=3 train.async_save=false "train.out_dir=$mnt/run" >"$FAIL_LOG" 2>&1; then
  fail "a checkpoint larger than the disk was saved"
fi
grep -q "not enough free space: the checkpoint needs [0-9]* bytes .* has [0-9]* bytes .* free; nothing was written" \
  "$FAIL_LOG" || fail "the error does not name both numbers"
compgen -G "$mnt/run/ckpt*" >/dev/null && fail "a partial checkpoint directory was left: $(ls "$mnt/run")"
echo "free space: $(grep -o 'not enough free space[^;]*' "$FAIL_LOG" | head -1)"
echo "async_save: PASS"
