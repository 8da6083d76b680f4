#!/usr/bin/env bash
# `parallm launch --restarts 1 --hostfile` over three emulated hosts (hosts.sh) with a job on two of them
# (2 ranks each, dp 2 x tp 2, dropout on, a checkpoint every 2 steps): host1's link is cut mid-run; the attempt
# ends (its ranks by comm.timeout_s, its launcher stopped by --linger), the failure names host1, and the restart
# runs without it, on host0 and host2 (dist info), from the last intact checkpoint, to the end: every step's loss
# and gradient norm equal the uninterrupted one-host run's bit for bit.
# Exits 77 (said) where namespaces cannot be made.
# Usage: restart_hosts.sh <parallm> <text file>
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
# shellcheck source=hosts.sh
. "$(dirname "$0")/hosts.sh"
# shellcheck source=restart_job.sh
. "$(dirname "$0")/restart_job.sh"
parallm=$1
restart_job_setup "$parallm" "$2"
hosts_up 3
FAIL_LOG=$work/cut.txt
on_host 0 "$parallm" launch -n 4 --hostfile "$hostfile" --restarts 1 --backoff 0 --linger 5 -- "$parallm" train \
  "${run[@]}" "train.out_dir=$work/cut" >"$FAIL_LOG" 2>&1 &
restart_job_cut $! "$work/cut"
grep -q "on host host1 did not answer" "$FAIL_LOG" || fail "no error names host1"
echo "restart_hosts: PASS"
