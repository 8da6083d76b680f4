#!/usr/bin/env bash
# The straggler report on 2 ranks: with PARALLM_FAULT_SLOW_RANK=1:400 (rank 1
# sleeps 400 ms in every step's compute, against ~10-20 ms of real compute)
# every interval's train record names rank 1 as the slowest, and a warning
# and the record's "stragglers" name it; without the fault, records carry the
# spread and nothing is named. The run without the fault is held to
# train.straggler_pct=400 (five times the peer's compute, over windows of 10
# steps), far above what a loaded machine's noise reaches; the faulted run to
# 100 (twice the peer's), which the 400 ms flag as long as a step's real
# compute stays under 400 ms (an ASan build under load reaches ~100 ms).
# Usage: straggler.sh <parallm> <text file> <launcher for 2 ranks with its flags>...
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
shift 2
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null || fail "prepare"
run=(model.n_layer=2 model.n_head=2 model.n_embd=128 model.block_size=64 model.batch_size=4 train.max_iters=21
  train.log_interval=5 train.straggler_window=2 train.eval_interval=1000 train.eval_iters=2 train.final_eval=false
  train.sample_tokens=0 train.progress=false train.peak_flops=1e11 "data.dir=$work/data")
PARALLM_FAULT_SLOW_RANK=1:400 OMP_NUM_THREADS=1 timeout 120 "$@" "$parallm" train "${run[@]}" \
  train.straggler_pct=100 "train.out_dir=$work/slow" >"$work/slow.txt" 2>&1 || { cat "$work/slow.txt"; fail "the run with a slow rank"; }
grep -q "straggler: rank 1 " "$work/slow.txt" || { cat "$work/slow.txt"; fail "no warning names rank 1"; }
grep -q "straggler: rank 0 " "$work/slow.txt" && fail "a warning names rank 0"
grep -qE "iter 20: .*compute [0-9.]+ms \(rank 0\) \.\. [0-9.]+ms \(rank 1\)" "$work/slow.txt" ||
  fail "the log line of iter 20 does not show rank 1 as the slowest"
m="$work/slow/metrics.jsonl"
for it in 0 5 10 15 20; do
  grep -E "\"step\":$it,.*\"slowest_rank\":1" "$m" >/dev/null || grep -E "\"slowest_rank\":1.*\"step\":$it," "$m" >/dev/null ||
    fail "the record of iter $it does not name rank 1 as the slowest"
done
grep -q '"stragglers":\[1\]' "$m" || fail "no record names rank 1 in \"stragglers\""
grep -q '"step_ms_max"' "$m" || fail "no step_ms_max in the records"
OMP_NUM_THREADS=1 timeout 120 "$@" "$parallm" train "${run[@]}" train.straggler_pct=400 "train.out_dir=$work/even" >"$work/even.txt" 2>&1 ||
  { cat "$work/even.txt"; fail "the run without a fault"; }
grep "straggler:" "$work/even.txt" && fail "a warning without a slow rank"
grep -q '"stragglers"' "$work/even/metrics.jsonl" && fail "a record names a straggler without a slow rank"
grep -q '"step_ms_min"' "$work/even/metrics.jsonl" || fail "no step_ms_min in the records without a fault"
echo "straggler: PASS ($(grep -c '"slowest_rank":1' "$m") of 5 intervals name rank 1; $(grep -o 'compute [^,]*' "$work/even.txt" | tail -1) without a fault)"
