#!/usr/bin/env bash
# Under Slurm across emulated hosts (hosts.sh, slurm.sh: three nodes, a slurmd in each host's namespaces):
#  1. srun -N 3 names host0, host1 and host2 (a multi-node Slurm);
#  2. `salloc -N 3 --no-kill parallm launch -n 4 --ppn 2 --restarts 1 -- parallm train ...` (dp 2 x tp 2,
#     dropout on, a checkpoint every 2 steps) runs on 2 of the 3 nodes (srun -N 2, one spare); host1's link is cut
#     mid-run; the attempt ends naming host1, the restart asks srun for 2 nodes without it (--exclude=host1), runs
#     on host0 and host2 (dist info) from the last intact checkpoint, and every step's loss and gradient norm equal
#     the uninterrupted run's bit for bit.
# Exits 77 (said) where namespaces cannot be made or Slurm cannot run.
# Usage: slurm_restart.sh <parallm> <text file>
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
# shellcheck source=hosts.sh
. "$(dirname "$0")/hosts.sh"
# shellcheck source=slurm.sh
. "$(dirname "$0")/slurm.sh"
# shellcheck source=restart_job.sh
. "$(dirname "$0")/restart_job.sh"
parallm=$(readlink -f "$1")
restart_job_setup "$parallm" "$2"
hosts_up 3
slurm_up
FAIL_LOG=$work/srun.txt
on_host 0 srun -N 3 hostname >"$FAIL_LOG" 2>&1 || fail "srun -N 3"
[ "$(sort "$FAIL_LOG" | tr '\n' ' ')" = "host0 host1 host2 " ] || fail "srun -N 3 did not run on host0, host1, host2"
echo "Slurm $(sinfo --version | cut -d' ' -f2) over 3 emulated hosts: srun -N 3 ran on $(sort "$FAIL_LOG" | tr '\n' ' ')"

FAIL_LOG=$work/cut.txt
on_host 0 timeout 200 salloc -N 3 --ntasks-per-node=2 --no-kill "$parallm" launch -n 4 --ppn 2 --restarts 1 \
  --backoff 0 --linger 5 -- "$parallm" train "${run[@]}" "train.out_dir=$work/cut" >"$FAIL_LOG" 2>&1 &
restart_job_cut $! "$work/cut"
grep -q "^launch: attempt 1 of 2: srun -n 4 --ntasks-per-node 2 --cpus-per-task 1 -N 2 " "$FAIL_LOG" ||
  fail "the first attempt does not ask srun for 2 of the 3 nodes"
grep -q "^launch: attempt 2 of 2: srun .*-N 2 --overlap --exclude=host1 " "$FAIL_LOG" ||
  fail "the restart's srun does not ask for 2 nodes without host1"
echo "slurm_restart: PASS"
