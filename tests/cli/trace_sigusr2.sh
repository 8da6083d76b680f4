#!/bin/bash
# An operator's view of a hang: `kill -USR2` on the launcher of a running job
# (Open MPI's mpirun forwards it to every rank; MPICH's mpiexec does not, so
# there the ranks are signalled) makes each rank write the stacks of all its
# threads to trace-<host>-<rank>.txt, and the job goes on.
# Usage: trace_sigusr2.sh PARALLM
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$(readlink -f "$1")
tmp=$work
FAIL_LOG=$tmp/out
job=
cleanup() {
  if [ -n "$job" ]; then
    kill -TERM "$job" 2>/dev/null  # mpirun passes it on to the ranks
    for _ in $(seq 30); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$job" 2>/dev/null
  fi
}
at_exit cleanup
cd "$tmp"
PARALLM_TRACE_DIR="$tmp" "$parallm" launch -n 2 -- parallm test-dist --iters 1000000 --log-interval 100 \
  --dims 32,64,32 --batch 8 --no-plot >"$tmp/out" 2>&1 &
job=$!
for _ in $(seq 200); do grep -q "^iter 100:" "$tmp/out" && break; sleep 0.1; done
grep -q "^iter 100:" "$tmp/out" || fail "the job did not start"
descendants() {  # every process below $1
  local kids
  kids=$(ps -eo pid=,ppid= | awk -v p="$1" '$2 == p {print $1}')
  for k in $kids; do
    echo "$k"
    descendants "$k"
  done
}
if grep -q "^launch: mpirun" "$tmp/out"; then
  kill -USR2 "$job"
else
  for p in $(descendants "$job"); do
    [ "$(cat /proc/"$p"/comm 2>/dev/null)" = parallm ] && kill -USR2 "$p"
  done
fi
for _ in $(seq 100); do [ "$(ls "$tmp"/trace-*.txt 2>/dev/null | wc -l)" = 2 ] && break; sleep 0.1; done
files=$(ls "$tmp"/trace-*-0.txt "$tmp"/trace-*-1.txt 2>/dev/null | wc -l)
[ "$files" = 2 ] || fail "expected trace-<host>-0.txt and trace-<host>-1.txt, found: $(ls "$tmp")"
for f in "$tmp"/trace-*.txt; do
  grep -q "parallm stack dump: SIGUSR2 received" "$f" || fail "$f has no header"
  grep -q '"parallm-comm"' "$f" || fail "$f does not show the communication thread"
  grep -q "test_dist" "$f" || fail "$f does not show the main thread in test-dist"
done
# The job is still running after the dumps.
lines=$(grep -c "^iter" "$tmp/out")
sleep 1
[ "$(grep -c "^iter" "$tmp/out")" -gt "$lines" ] || kill -0 "$job" 2>/dev/null || fail "the job stopped"
echo "trace_sigusr2: PASS ($(grep -c '^thread' "$tmp"/trace-*-0.txt) threads in rank 0's dump)"
