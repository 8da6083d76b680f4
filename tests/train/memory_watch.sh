#!/usr/bin/env bash
# The resident-memory watchdog: a run with a planted leak (PARALLM_FAULT_LEAK,
# 256 KiB a step) is warned about within 50 steps, naming the rank and the
# growth; the same run without it is not, over 60 steps; every step's record
# holds rss_mb.
# Usage: memory_watch.sh <parallm> <text file>
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null || fail "prepare"
# A sanitizer build holds freed memory in AddressSanitizer's quarantine, which grows the resident set with every
# record a step writes: off here, so the watchdog sees what a release build's run does (no effect elsewhere).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0"
run=(model.n_layer=1 model.n_head=2 model.n_embd=16 model.block_size=16 model.batch_size=2 train.max_iters=59
  train.eval_interval=1000 train.final_eval=false train.progress=false train.sample_tokens=0 train.log_interval=1000
  "data.dir=$work/data")
FAIL_LOG=$work/plain.txt
"$parallm" train "${run[@]}" "train.out_dir=$work/plain" >"$FAIL_LOG" 2>&1 || fail "the run without a leak"
grep -q "resident memory" "$FAIL_LOG" && fail "a run without a leak was warned about"
[ "$(grep -c '"rss_mb"' "$work/plain/metrics.jsonl")" -eq 60 ] || fail "not every step's record holds rss_mb"
FAIL_LOG=$work/leak.txt
PARALLM_FAULT_LEAK=256 "$parallm" train "${run[@]}" "train.out_dir=$work/leak" >"$FAIL_LOG" 2>&1 ||
  fail "the run with a leak"
line=$(grep "resident memory of rank 0 grew" "$FAIL_LOG") || fail "the planted leak was not warned about"
at=$(echo "$line" | sed -n 's/.* to iteration \([0-9]*\).*/\1/p')
if [ -z "$at" ] || [ "$at" -ge 50 ]; then fail "warned at iteration ${at:-?}, not within 50 steps"; fi
[ "$(grep -c "resident memory" "$FAIL_LOG")" -eq 1 ] || fail "warned more than once"
echo "$line"
echo "memory_watch: PASS"
