#!/usr/bin/env bash
# Two hosts emulated on this machine (hosts.sh: network namespaces joined by
# veth pairs, Open MPI's daemon started in them instead of over ssh), two
# ranks each, through `parallm launch --hostfile`:
#  1. dp 2 x tp 2 equals the same job on one host bit for bit (every step's
#     loss and gradient norm), and its dist info shows 2 nodes, host0 and host1,
#     each tensor-parallel group inside one host;
#  2. tp 4 (a group across the hosts) is refused, naming the rule and the key;
#  3. `parallm bench comm` reports the world, then intra-host and inter-host busbw apart (checked results).
# (A host cut mid-run: host_cut.sh.)
# Exits 77 (said) where namespaces cannot be made.
# Usage: two_hosts.sh <parallm> <text file>
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
# shellcheck source=hosts.sh
. "$(dirname "$0")/hosts.sh"
parallm=$1
input=$2
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null || fail "prepare"
run=(model.n_layer=2 model.n_head=4 model.n_embd=32 model.block_size=32 model.batch_size=4 model.dropout=0.1
  model.vocab_size=67 train.max_iters=10 train.eval_interval=5 train.progress=false train.sample_tokens=0
  train.log_interval=1 comm.timeout_s=30 "data.dir=$work/data")
export OMP_NUM_THREADS=1
FAIL_LOG=$work/one.txt
"$parallm" launch -n 4 -- "$parallm" train "${run[@]}" parallel.tp=2 "train.out_dir=$work/one" >"$FAIL_LOG" 2>&1 ||
  fail "the one-host run"
hosts_up 2
FAIL_LOG=$work/two.txt
on_host 0 "$parallm" launch -n 4 --hostfile "$hostfile" -- "$parallm" train "${run[@]}" parallel.tp=2 \
  "train.out_dir=$work/two" >"$FAIL_LOG" 2>&1 || fail "the two-host run"
grep -q "dist: world size 4, 2 nodes, 2 ranks per node" "$FAIL_LOG" || fail "the dist info does not show 2 nodes"
grep -q "dist: hosts host0, host1" "$FAIL_LOG" || fail "the dist info does not name the hosts"
for r in "0/4.*node 0/2.*host0.*tp 0/2" "1/4.*node 0/2.*host0.*tp 1/2" "2/4.*node 1/2.*host1.*tp 0/2" \
  "3/4.*node 1/2.*host1.*tp 1/2"; do
  grep -q "dist: \[rank $r" "$FAIL_LOG" || fail "no rank placed as $r"
done
step_records "$work/one" >"$work/one.steps"
step_records "$work/two" >"$work/two.steps"
[ "$(grep -c '^train' "$work/one.steps")" -eq 11 ] || fail "the one-host run has $(grep -c '^train' "$work/one.steps") steps"
cmp -s "$work/one.steps" "$work/two.steps" ||
  fail "the two-host run differs from the one-host run: $(diff "$work/one.steps" "$work/two.steps" | head -4)"
echo "2 hosts x 2 ranks (dp 2 x tp 2): 2 nodes in the dist info; $(grep -c . "$work/two.steps") records bitwise the one-host run's"
FAIL_LOG=$work/tp4.txt
if on_host 0 "$parallm" launch -n 4 --hostfile "$hostfile" -- "$parallm" train "${run[@]}" parallel.tp=4 \
  "train.out_dir=$work/tp4" >"$FAIL_LOG" 2>&1; then
  fail "a tensor-parallel group across hosts was not refused"
fi
grep -q "parallel.tp=4 does not fit the 2 ranks of a node.*parallel.tp_across_nodes=true" "$FAIL_LOG" ||
  fail "the refusal does not name the rule and the key"
grep -m1 -o "error: \[config\] parallel.tp=4 does not fit[^:]*" "$FAIL_LOG"
FAIL_LOG=$work/bench.txt
on_host 0 "$parallm" launch -n 4 --hostfile "$hostfile" -- "$parallm" bench comm -b 1M -e 1M --rounds 1 -n 3 -w 1 \
  --check >"$FAIL_LOG" 2>&1 || fail "bench comm over the hosts"
[ "$(grep -c "# avg busbw at 1 MiB and above" "$FAIL_LOG")" -eq 3 ] || fail "not three busbw tables"
[ "$(grep -c "# check: all results correct" "$FAIL_LOG")" -eq 3 ] || fail "a table's results are wrong"
for g in intra-host inter-host; do
  grep -A8 "^# $g:" "$FAIL_LOG" | grep -q "# avg busbw" || fail "no $g table"
  echo "bench comm $g: $(grep -A8 "^# $g:" "$FAIL_LOG" | grep -m1 -o "avg busbw.*")"
done

echo "two_hosts: PASS"
