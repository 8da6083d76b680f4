#!/usr/bin/env bash
# One job under a real Slurm, as a new user would run it. Starts a
# single-node Slurm of its own (munged, slurmctld and slurmd as root, every
# file in a temporary directory, its own ports, MpiDefault=none) and runs
#   salloc -n 2 parallm launch -- parallm train ...
#   salloc -n 2 srun --mpi=pmix parallm train ...
#   sbatch --time=1 --signal=USR1@15 (parallm launch ...), then
#   sbatch --dependency=afterany:<first> (the same, resumed)
# Each must be one 2-rank job that trains and exits 0: the dist info says
# world size 2 once, with the CPUs split between the ranks, and the run
# directory holds one run's records. Then tasks that cannot join each other
# (srun --mpi=none; comm.backend=self) must exit non-zero with the error
# naming the variables they saw, and train nothing.
# Usage: slurm_job.sh PARALLM INPUT_TEXT. Needs root and Debian's slurm-wlm
# and munge (.ci/run installs them). Exit 77, with the reason and the
# daemons' logs, only where the daemons cannot start; 1 on any failure.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$(readlink -f "$1")
input=$(readlink -f "$2")
tmp=$work
unset OMP_NUM_THREADS  # the threads per rank are part of what is checked
pids=() names=()  # the daemons started, and their names
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
}
at_exit cleanup
logs() { tail -n 15 "$tmp"/*.log 2>/dev/null; }
skip() {
  echo "slurm_job: SKIPPED: $*"
  logs
  exit 77
}

[ "$(id -u)" = 0 ] || skip "the Slurm daemons need root"
for prog in munged slurmctld slurmd salloc srun sinfo; do
  command -v $prog >/dev/null || skip "$prog is not installed (apt-get install slurm-wlm munge)"
done

# munge: a key of its own and a socket in $tmp.
mkdir -m 700 "$tmp/munge"
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge/munge.key"
socket="$tmp/munge/munge.socket"
munged --foreground --force --socket="$socket" --key-file="$tmp/munge/munge.key" --log-file="$tmp/munged.log" \
  --pid-file="$tmp/munge/munged.pid" --seed-file="$tmp/munge/munged.seed" >>"$tmp/munged.log" 2>&1 &
pids+=($!) names+=(munged)
for _ in $(seq 50); do [ -S "$socket" ] && break; sleep 0.1; done
munge -S "$socket" -n | unmunge -S "$socket" >/dev/null 2>&1 || skip "munged did not start"

# slurm.conf: this host with its CPUs (at least 2, for 2 tasks), no PMI by default, no cgroups.
host=$(hostname -s)
cpus=$(nproc)
port=$((20000 + $$ % 20000))
mkdir -p "$tmp/state" "$tmp/spool"
export SLURM_CONF="$tmp/slurm.conf"
cat >"$SLURM_CONF" <<EOF
ClusterName=parallm-ci
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=$((cpus < 2 ? 2 : cpus)) State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -i -f "$SLURM_CONF" >>"$tmp/slurmctld.log" 2>&1 &
pids+=($!) names+=(slurmctld)
slurmd -D -f "$SLURM_CONF" >>"$tmp/slurmd.log" 2>&1 &
pids+=($!) names+=(slurmd)
state=
for _ in $(seq 150); do
  for i in "${!pids[@]}"; do kill -0 "${pids[$i]}" 2>/dev/null || skip "${names[$i]} exited at start"; done
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null)
  [ "$state" = idle ] && break
  sleep 0.2
done
[ "$state" = idle ] || { logs; fail "the node is not idle after 30 s (state: ${state:-no answer})"; }
echo "slurm_job: Slurm $(sinfo --version | cut -d' ' -f2) up on $host ($cpus CPUs), MPI plugins:" \
  "$(srun --mpi=list 2>&1 | tr -s ' \n' ' ')"

# A tiny model on tiny Shakespeare.
cd "$tmp"
"$parallm" prepare shakespeare_char --input "$input" --out "$tmp/data" >/dev/null || fail "prepare"
iters=20
tiny=(model.n_layer=2 model.n_head=2 model.n_embd=64 model.block_size=64 model.batch_size=4 model.dropout=0
  train.max_iters=$iters train.eval_interval=10 train.eval_iters=2 train.log_interval=1 train.progress=false
  train.sample_tokens=0 "data.dir=$tmp/data")
run() {  # name, command...: runs it, leaves its output in $tmp/name.txt and its exit code in $rc
  local name=$1
  shift
  echo "slurm_job: $name: $*"
  timeout 300 "$@" >"$tmp/$name.txt" 2>&1
  rc=$?
  grep -E '^launch: (Slurm|srun)' "$tmp/$name.txt" | sed "s/^/slurm_job: $name: /"
  echo "slurm_job: $name: exit code $rc; dist info: $(grep '^dist: world size' "$tmp/$name.txt" | tr '\n' ' ')"
}
# One 2-rank job: exit 0, the dist info once with world size 2 and the cores split between the ranks,
# and one run's records in the run directory (steps 0 to max_iters, each once).
one_job() {  # name
  local name=$1 out=$tmp/$1.txt dir=$tmp/run-$1 threads=$((cpus / 2 > 0 ? cpus / 2 : 1))
  [ "$rc" = 0 ] || { cat "$out"; fail "$name: exit code $rc"; }
  [ "$(grep -c '^dist: world size' "$out")" = 1 ] ||
    { cat "$out"; fail "$name: not one job (the dist info printed $(grep -c '^dist: world size' "$out") times)"; }
  grep -q '^dist: world size 2, 1 node, 2 ranks per node, backend mpi' "$out" ||
    { cat "$out"; fail "$name: not one 2-rank MPI job"; }
  grep -Eq "^dist: .*device cpu \($threads threads? per rank\)" "$out" ||
    fail "$name: not $threads thread(s) per rank on $cpus CPUs"
  [ "$(grep -c '^done: iters' "$out")" = 1 ] || fail "$name: the training did not end once"
  local records
  records=$(grep -c '"kind":"train"' "$dir/metrics.jsonl")
  [ "$records" = $((iters + 1)) ] || fail "$name: $dir/metrics.jsonl holds $records step records, not $((iters + 1))"
}
run launch salloc -n 2 "$parallm" launch -- parallm train "${tiny[@]}" "train.out_dir=$tmp/run-launch"
grep -q -- '--mpi=pmix' "$tmp/launch.txt" || fail "launch: srun was not given --mpi=pmix"
one_job launch
run srun salloc -n 2 srun --mpi=pmix "$parallm" train "${tiny[@]}" "train.out_dir=$tmp/run-srun"
one_job srun

# Tasks that cannot join each other stop, naming the variables they saw, and train nothing.
not_alone() {  # name, what the error must say
  local name=$1 out=$tmp/$1.txt
  [ "$rc" != 0 ] || { cat "$out"; fail "$name: exit code 0: a task trained alone"; }
  grep -q "$2" "$out" || { cat "$out"; fail "$name: no error naming the variables ($2)"; }
  ! grep -q '^iter ' "$out" || fail "$name: a task trained"
  echo "slurm_job: $name: $(grep -m1 -o "$2.*" "$out" | cut -c1-160)..."
}
run no_pmi salloc -n 2 srun --mpi=none "$parallm" train "${tiny[@]}" "train.out_dir=$tmp/run-no-pmi"
not_alone no_pmi 'task [01] of a Slurm step (SLURM_PROCID=[01], SLURM_STEP_NUM_TASKS=2), but srun gave it no PMI'
run self salloc -n 2 srun --mpi=pmix "$parallm" train "${tiny[@]}" comm.backend=self "train.out_dir=$tmp/run-self"
not_alone self 'backend self runs one rank alone, but this process is task [01] of 2 of a launched job (PMIX_RANK=[01], SLURM_STEP_NUM_TASKS=2)'

# Preemption: a batch job with a 1-minute limit and --signal=USR1@15 runs a
# run far longer than that through parallm launch on 2 ranks; Slurm signals
# the tasks before the limit and they must save and exit 0 (job COMPLETED,
# exit code 0:0). A second job, submitted behind it with --dependency,
# resumes where the first stopped (and reads its own limit: max_duration=auto).
job_state() { scontrol show job "$1" -o 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
wait_job() {  # job id, seconds: waits until it ended (a final state; any other, e.g. one shown while Slurm signals it, is waited out)
  for _ in $(seq $(($2 * 5))); do
    case $(job_state "$1") in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | PREEMPTED | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) return 0 ;;
    *) sleep 0.2 ;;
    esac
  done
  fail "job $1 still $(job_state "$1") after $2 s"
}
ended_ok() {  # job id, name: COMPLETED with exit code 0:0
  local info
  info=$(scontrol show job "$1" -o)
  echo "slurm_job: $2: job $1 $(grep -o 'JobState=[A-Z_]* Reason=[^ ]*' <<<"$info") $(grep -o 'ExitCode=[0-9:]*' <<<"$info")" \
    "$(grep -o 'RunTime=[0-9:]*' <<<"$info")"
  grep -q 'JobState=COMPLETED' <<<"$info" && grep -q 'ExitCode=0:0' <<<"$info" ||
    { cat "$tmp/$2.txt"; fail "$2: job $1 did not end COMPLETED with exit code 0"; }
}
long=("${tiny[@]/train.max_iters=$iters/train.max_iters=100000000}")
long=("${long[@]/train.eval_interval=10/train.eval_interval=100000000}")
cat >"$tmp/preempt1.sh" <<EOS
#!/bin/bash
exec "$parallm" launch -- parallm train ${long[*]} train.out_dir=$tmp/run-preempt
EOS
cat >"$tmp/preempt2.sh" <<EOS
#!/bin/bash
k=\$(ls -d $tmp/run-preempt/ckpt-* | grep -vF -e .tmp -e .old | sort | tail -1 | sed 's/.*ckpt-0*//')
echo "preempt2: resuming at step \$k"
exec "$parallm" launch -- parallm train ${long[*]} train.out_dir=$tmp/run-preempt train.init_from=resume \
  train.max_iters=\$((k + 10)) train.max_duration=auto
EOS
chmod +x "$tmp/preempt1.sh" "$tmp/preempt2.sh"
j1=$(sbatch --parsable -n 2 --time=1 --signal=USR1@15 -o "$tmp/preempt1.txt" "$tmp/preempt1.sh") ||
  fail "sbatch of the first job"
j2=$(sbatch --parsable -n 2 --time=2 --dependency=afterany:"$j1" -o "$tmp/preempt2.txt" "$tmp/preempt2.sh") ||
  fail "sbatch of the second job"
echo "slurm_job: preempt1: sbatch -n 2 --time=1 --signal=USR1@15 (job $j1); preempt2: --dependency=afterany:$j1 (job $j2)"
wait_job "$j1" 120
ended_ok "$j1" preempt1
grep -q 'SIGUSR1 received by rank' "$tmp/preempt1.txt" || { cat "$tmp/preempt1.txt"; fail "preempt1: no SIGUSR1 seen"; }
stops=$(grep -oE 'rank [01] stopped after iteration [0-9]+' "$tmp/preempt1.txt" | awk '{print $NF}' | sort -u)
[ "$(grep -cE 'rank [01] stopped after iteration' "$tmp/preempt1.txt")" = 2 ] && [ "$(wc -w <<<"$stops")" = 1 ] ||
  { cat "$tmp/preempt1.txt"; fail "preempt1: the 2 ranks did not stop at one iteration"; }
echo "slurm_job: preempt1: $(grep -m1 '^stopped after iteration' "$tmp/preempt1.txt" | cut -c1-200)"
wait_job "$j2" 120
ended_ok "$j2" preempt2
k=$((stops + 1))
grep -q "resuming from $tmp/run-preempt/ckpt-0*$k at iter $k " "$tmp/preempt2.txt" ||
  { cat "$tmp/preempt2.txt"; fail "preempt2: did not resume at iteration $k"; }
grep -q 'time limit: .* (train.max_duration=auto' "$tmp/preempt2.txt" ||
  { cat "$tmp/preempt2.txt"; fail "preempt2: train.max_duration=auto did not read the job's limit"; }
steps=$(grep '"kind":"train"' "$tmp/run-preempt/metrics.jsonl" | grep -o '"step":[0-9]*' | cut -d: -f2)
[ "$(sort -n <<<"$steps" | uniq | tr '\n' ' ')" = "$(seq 0 $((k + 10)) | tr '\n' ' ')" ] &&
  [ "$(wc -l <<<"$steps")" = $((k + 11)) ] || fail "preempt: the records are not steps 0..$((k + 10)) once each"
echo "slurm_job: preempt2: $(grep -m1 'resuming from' "$tmp/preempt2.txt" | cut -c1-120); $(grep -m1 'time limit:' "$tmp/preempt2.txt" | cut -c1-120)"
echo "slurm_job: preempt: job $j1 stopped by SIGUSR1 after iteration $stops and exited 0; job $j2 resumed at $k and" \
  "finished; the records hold steps 0..$((k + 10)) once each"
echo "slurm_job: PASS (salloc + parallm launch and salloc + srun --mpi=pmix each ran one 2-rank job; tasks that" \
  "cannot join stopped with the error; a job preempted by --signal=USR1 saved, exited 0 and the next one resumed)"
