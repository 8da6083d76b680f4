#!/usr/bin/env bash
# A run whose directory fills up: resumed on a nearly full filesystem (a
# 1 MiB tmpfs where this user may mount one, else a per-file size limit,
# which fails writes the same way), it must stop with an error naming the
# file it could not write, leave metrics.jsonl with whole lines only, keep a
# checkpoint that loads and no ckpt.tmp, and resume once there is room.
# Usage: full_disk.sh <parallm> <text file>   (FULL_DISK_NO_MOUNT=1: the size limit even where a mount works)
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
mnt=$work/disk
at_exit 'umount "$mnt" 2>/dev/null'
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null || fail "prepare"
mkdir -p "$mnt"
mode=fsize
if [ -z "${FULL_DISK_NO_MOUNT:-}" ] && mount -t tmpfs -o size=1m tmpfs "$mnt" 2>/dev/null; then mode=tmpfs; fi
run="$mnt/run"
tiny=(model.n_layer=1 model.n_head=2 model.n_embd=16 model.block_size=16 model.batch_size=2 train.eval_iters=1
  train.progress=false train.sample_tokens=0 train.eval_interval=100000 train.log_interval=1
  "data.dir=$work/data" "train.out_dir=$run")
"$parallm" train "${tiny[@]}" train.max_iters=5 >/dev/null || fail "the first run"

# Fill the disk to about 24 KB free (tmpfs: room for the resume's start-up records; with 12 KB an ASan CI run
# once failed on repro.json.tmp before the first step), or cap every file at 40 KB.
limit=()
if [ $mode = tmpfs ]; then
  dd if=/dev/zero of="$mnt/filler" bs=4k 2>/dev/null
  truncate -s -24K "$mnt/filler"
else
  trap '' XFSZ
  limit=(ulimit -f 40)
fi
out=$( ( "${limit[@]:-true}"; "$parallm" train "${tiny[@]}" train.init_from=resume train.max_iters=400 ) 2>&1)
rc=$?
echo "$out" | tail -3
[ $rc -eq 1 ] || fail "exit code $rc, expected 1"
echo "$out" | grep -Eq "cannot write $run/(metrics.jsonl|train.log): (No space left on device|File too large)" ||
  fail "the error does not name the file it could not write"
echo "$out" | grep -q "the run stopped after iteration" || fail "the error does not say where the run stopped"
[ -e "$run/ckpt.tmp" ] && fail "ckpt.tmp was left behind"
[ "$(tail -c 1 "$run/metrics.jsonl" | od -An -c | tr -d ' ')" = '\n' ] || fail "metrics.jsonl ends in a cut line"
tail -n 1 "$run/metrics.jsonl" | grep -q '}$' || fail "metrics.jsonl ends in a cut line"
[ "$(tail -c 1 "$run/train.log" | od -An -c | tr -d ' ')" = '\n' ] || fail "train.log ends in a cut line"

# With room again, the run goes on from its checkpoint and finishes.
rm -f "$mnt/filler"
"$parallm" train "${tiny[@]}" train.init_from=resume train.max_iters=400 >"$work/resumed.txt" 2>&1 ||
  { cat "$work/resumed.txt"; fail "the resume after freeing space"; }
grep -q "done: iters" "$work/resumed.txt" || fail "the resumed run did not finish"
echo "full_disk: PASS ($mode)"
