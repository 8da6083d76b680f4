#!/bin/bash
# Issue 44: the layout fuzzer over any number of consecutive seeds, in chunks (each chunk one layout_fuzz run, so
# a long range can be stopped and continued, and on a shared machine each chunk can take a lock of its own).
# usage: bench/layout_fuzz.sh [cases] [first seed] [chunk] [layout_fuzz] [-- extra layout_fuzz options]
#   LOCK=/tmp/parallm-cpu.lock bench/layout_fuzz.sh 1000 1 100    # chunks of 100 cases, each under flock
# Prints every chunk's summary, then the whole range's: cases, failed seeds, seconds a case, and the largest
# differences seen. Each failed case's report (seed, layouts, command lines, the value that differed) is in the
# chunk's log, $OUT/chunk-<first seed>.log (OUT defaults to out/layout_fuzz). Exit 1 if any case failed.
set -u
CASES=${1:-100}
FIRST=${2:-1}
CHUNK=${3:-100}
BIN=${4:-build/tests/layout_fuzz}
shift $(($# < 4 ? $# : 4))
[ "${1:-}" = "--" ] && shift
OUT=${OUT:-out/layout_fuzz}
mkdir -p "$OUT"
total=0 failed=0 seconds=0 worst_loss=0 worst_grad=0 worst_params=0 seeds=""
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }
for ((s = FIRST; s < FIRST + CASES; s += CHUNK)); do
  n=$((FIRST + CASES - s < CHUNK ? FIRST + CASES - s : CHUNK))
  log="$OUT/chunk-$s.log"
  if [ -n "${LOCK:-}" ]; then
    flock "$LOCK" "$BIN" --first-seed "$s" --cases "$n" "$@" > "$log" 2>&1
  else
    "$BIN" --first-seed "$s" --cases "$n" "$@" > "$log" 2>&1
  fi
  summary=$(grep -E "^layout_fuzz: [0-9]+ case\(s\) in" "$log")
  [ -n "$summary" ] || { echo "chunk $s: no summary (see $log)"; tail -5 "$log"; exit 1; }
  echo "seeds $s..$((s + n - 1)): ${summary#layout_fuzz: }"
  ran=$(sed -E 's/^layout_fuzz: ([0-9]+) case.*/\1/' <<< "$summary")
  secs=$(sed -E 's/.* in ([0-9.]+) s .*/\1/' <<< "$summary")
  bad=$(sed -E 's/.*s a case\), ([0-9]+) failed.*/\1/' <<< "$summary")
  total=$((total + ran)) failed=$((failed + bad))
  seconds=$(awk -v a="$seconds" -v b="$secs" 'BEGIN { print a + b }')
  seeds="$seeds $(grep -E '^  seed [0-9]+$' "$log" | awk '{print $2}' | tr '\n' ' ')"
  diffs=$(grep -E "^layout_fuzz: largest relative differences" "$log")
  worst_loss=$(max "$worst_loss" "$(sed -E 's/.*differences: loss ([^ ]+) .*/\1/' <<< "$diffs")")
  worst_grad=$(max "$worst_grad" "$(sed -E 's/.*grad_norm ([^ ]+) .*/\1/' <<< "$diffs")")
  worst_params=$(max "$worst_params" "$(sed -E 's/.*parameters ([^ ]+) .*/\1/' <<< "$diffs")")
done
per=$(awk -v a="$seconds" -v n="$total" 'BEGIN { printf "%.2f", n ? a / n : 0 }')
echo "layout_fuzz.sh: seeds $FIRST..$((FIRST + CASES - 1)): $total cases, $failed failed, $per s a case (${seconds} s)"
echo "layout_fuzz.sh: largest differences: loss $worst_loss, grad_norm $worst_grad (relative), parameters $worst_params (rms, learning rates)"
[ "$failed" = 0 ] || { echo "layout_fuzz.sh: failed seeds:$seeds"; exit 1; }
