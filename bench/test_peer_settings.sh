#!/bin/sh
# bench_train against bench/stub_peer.py: every peer setting it tried is a row
# of its table, the fastest (only "system BLAS, intra-op 2, OMP passive") is
# the one marked and the one the ratio uses, and the caller's OMP_WAIT_POLICY
# and OPENBLAS_CORETYPE do not leak into the settings that do not name them.
# Usage: test_peer_settings.sh BENCH_TRAIN STUB_PEER
set -u
fail() {
  echo "test_peer_settings: FAIL: $1"
  exit 1
}
out=$(OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=Zen "$1" --configs a --iters 1 --warmup 0 --peer-iters 1 \
  --threads 2 --data /nonexistent --peer-script "$2" 2>&1) || { echo "$out"; fail "bench_train exited non-zero"; }
echo "$out"
tried=$(echo "$out" | grep -c '^  peer \[')
rows=$(echo "$out" | grep -c '^| (a) | ')
{ [ "$tried" -ge 3 ] && [ "$tried" = "$rows" ]; } || fail "$tried settings tried, $rows rows in the table"
echo "$out" | grep -q '^  pytorch (best: system BLAS, intra-op 2, OMP passive): 131 tokens/s' ||
  fail "the fastest setting is not the one reported"
echo "$out" | grep -Eq '^\| \(a\) \| system BLAS, intra-op 2, OMP passive +\| \* +\| +131 \|' ||
  fail "the fastest setting is not marked"
[ "$(echo "$out" | grep -c '^| (a) | .*| \* ')" = 1 ] || fail "not exactly one setting marked"
echo "$out" | grep -Eq '^\| \(a\) \| system BLAS, intra-op 2 +\| +\| +111 \|' ||
  fail "the caller's OMP_WAIT_POLICY or OPENBLAS_CORETYPE leaked into a setting"
echo "test_peer_settings: PASS"
