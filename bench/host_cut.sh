#!/usr/bin/env bash
# A host lost mid-run, TRIALS times: two emulated hosts (tests/cluster/hosts.sh) x 2 ranks, dp 2 x tp 2,
# comm.timeout_s=5; after 5 steps host1's link goes down. Prints per trial how long until every rank (on both
# hosts) had ended (the bar: comm.timeout_s + 10 s) and the error naming host1, or what was left running after
# 30 s. Open MPI's mpirun itself keeps waiting for host1's daemon: killed. Root, where namespaces can be made
# (else exit 77). Exits 1 unless every trial met the bar. HOST_CUT_KEEP=<dir>: every trial's output, stacks and
# hang records are copied there.
# HOST_CUT_HOW=kill SIGKILLs every rank of host1 instead of cutting its link (the bar and the checks are the same).
# Usage: bench/host_cut.sh <parallm> <text file> [TRIALS=5]
# shellcheck source-path=SCRIPTDIR source=../tests/lib.sh
. "$(dirname "$0")/../tests/lib.sh"
# shellcheck source=../tests/cluster/hosts.sh
. "$(dirname "$0")/../tests/cluster/hosts.sh"
parallm=$(realpath "$1")
input=$2
trials=${3:-5}
how=${HOST_CUT_HOW:-cut}
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null || fail "prepare"
run=(model.n_layer=2 model.n_head=4 model.n_embd=32 model.block_size=32 model.batch_size=4 model.dropout=0.1
  model.vocab_size=67 train.progress=false train.sample_tokens=0 train.log_interval=1 "data.dir=$work/data")
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ended=0
for ((t = 1; t <= trials; t++)); do
  hosts_up 2

  FAIL_LOG=$work/cut$t.txt
  cd "$work" || echo "trial $t: cd"  # the ranks' stack dumps (PARALLM_TRACE_DIR unset) land here
  on_host 0 "$parallm" launch -n 4 --hostfile "$hostfile" -- "$parallm" train "${run[@]}" parallel.tp=2 \
    train.max_iters=1000000 train.eval_interval=1000000 comm.timeout_s=5 "train.out_dir=$work/cut$t" >"$FAIL_LOG" 2>&1 &
  job=$!
  # shellcheck disable=SC2009  # pgrep cannot tell the ranks from the launcher by their first word
  ranks() { ps -eo comm,args | grep "^parallm .*train.out_dir=$work/cut$t" | grep -vc " launch "; }
  for ((w = 0; w < 600; w++)); do
    [ "0$(grep -c '"kind":"train"' "$work/cut$t/metrics.jsonl" 2>/dev/null)" -ge 5 ] && break
    sleep 0.1
  done
  [ "$(ranks)" -eq 4 ] || echo "trial $t: the run to cut has $(ranks) ranks"
  start=$(date +%s.%N)
  if [ "$how" = kill ]; then  # every rank of host1 SIGKILLed (its network namespace's processes: the ranks, orted)
    for p in $(ip netns pids "${_ns_pre}1"); do
      grep -q "train.out_dir=$work/cut$t" /proc/"$p"/cmdline 2>/dev/null && kill -KILL "$p"
    done
  else
    cut_host 1
  fi
  for ((w = 0; w < 300; w++)); do
    [ "$(ranks)" -eq 0 ] && break
    sleep 0.1
  done
  took=$(echo "$(date +%s.%N) - $start" | bc)
  left=$(ranks)
  if [ "$left" -ne 0 ]; then
    # Their stacks (kill -USR2 writes trace-<host>-<rank>.txt here), kept where HOST_CUT_KEEP names a directory.
    pkill -USR2 -f "^$parallm train .*train.out_dir=$work/cut$t"
    sleep 2
    for p in $(pgrep -f "train.out_dir=$work/cut$t"); do
      echo "left: $p $(ip netns identify "$p") $(tr '\0' ' ' </proc/"$p"/cmdline | cut -c1-60) state $(awk '{print $3}' /proc/"$p"/stat) wchan $(cat /proc/"$p"/wchan)"
    done
  fi
  # The launcher's own report (a killed rank's host) comes as it ends: a moment for it (after a cut it waits for the
  # lost daemon, and is killed below).
  for ((w = 0; w < 50; w++)); do
    kill -0 $job 2>/dev/null || break
    sleep 0.1
  done
  # Every trial's output, stacks and hang records, kept where HOST_CUT_KEEP names a directory.
  [ -n "${HOST_CUT_KEEP:-}" ] && mkdir -p "$HOST_CUT_KEEP/cut$t" &&
    cp "$work"/trace-*.txt "$work/cut$t"/hang-* "$FAIL_LOG" "$HOST_CUT_KEEP/cut$t/" 2>/dev/null
  rm -f "$work"/trace-*.txt
  kill -KILL $job 2>/dev/null
  pkill -KILL -f "train.out_dir=$work/cut$t"
  met=1
  [ "$left" -eq 0 ] || { echo "trial $t: $left ranks still running 30 s after host1 was $how"; met=0; }
  echo "$took < 15" | bc | grep -q 1 ||
    { echo "trial $t: the ranks ended $took s after the cut (comm.timeout_s + 10 = 15)"; met=0; }
  # parallm's timeout, or (ranks killed) Open MPI's report of them.
  named='ranks* [0-9,]* on host host1 did not answer|on node host1 exited on signal 9|Peer host: +host1'
  grep -qE "$named" "$FAIL_LOG" || { echo "trial $t: no error names host1"; met=0; }
  echo "trial $t: $left ranks left after $took s; $(grep -m1 -oE "$named" "$FAIL_LOG")"
  ended=$((ended + met))
  hosts_down
  _ns_n=0
done
echo "host_cut: $ended of $trials trials ended every rank within comm.timeout_s + 10 s, naming host1"
[ "$ended" -eq "$trials" ]
