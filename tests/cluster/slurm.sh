# A Slurm cluster over the emulated hosts (sourced by the cluster tests after ../lib.sh and hosts.sh, after
# hosts_up N): slurm_up starts munged and slurmctld on this machine (on the hosts' bridge, 10.77.<id>.254) and a
# slurmd in each host's network namespace with the host's name (host0, host1, ...), 2 CPUs each, PMIx available;
# every file in $work, ports of its own. Each slurmd also gets a mount namespace binding a directory of its own
# over Slurm's TmpFS: the hosts share this machine's file system, and PMIx's per-node directories must not meet.
# Exits 77 (said, with the daemons' logs) where Slurm is missing or its daemons cannot start. Everything is
# stopped at exit. Not Open MPI's rsh launch: jobs start through salloc/srun as on a Slurm cluster.
# shellcheck shell=bash disable=SC2154
# ($work, at_exit, fail, _ns_id, _ns_pre and _ns_n come from ../lib.sh and hosts.sh.)
_sl_pids=()
slurm_down() {
  local p
  for p in "${_sl_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${_sl_pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  return 0
}
_sl_skip() {
  echo "$TEST_NAME: SKIPPED: $*"
  tail -n 5 "$work"/slurm-*.log 2>/dev/null
  exit 77
}
slurm_up() {
  local k state t="$work/slurm" sub="10.77.${_ns_id}" port=$((20000 + $$ % 20000))
  [ "$(id -u)" = 0 ] || _sl_skip "the Slurm daemons need root"
  for prog in munged munge unmunge slurmctld slurmd salloc srun sinfo nsenter; do
    command -v $prog >/dev/null || _sl_skip "$prog is not installed (apt-get install slurm-wlm munge)"
  done
  at_exit slurm_down
  { mkdir -p "$t/state" "$t/nodetmp" && mkdir -m 700 "$t/munge"; } || fail "$t"
  dd if=/dev/urandom of="$t/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$t/munge/munge.key"
  local socket="$t/munge/munge.socket"
  munged --foreground --force --socket="$socket" --key-file="$t/munge/munge.key" --log-file="$work/slurm-munged.log" \
    --pid-file="$t/munge/munged.pid" --seed-file="$t/munge/munged.seed" >>"$work/slurm-munged.log" 2>&1 &
  _sl_pids+=($!)
  for _ in $(seq 50); do [ -S "$socket" ] && break; sleep 0.1; done
  munge -S "$socket" -n | unmunge -S "$socket" >/dev/null 2>&1 || _sl_skip "munged did not start"
  export SLURM_CONF="$t/slurm.conf"
  {
    echo "ClusterName=parallm-hosts"
    echo "SlurmctldHost=$(hostname -s)($sub.254)"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "SlurmctldPort=$port"
    echo "SlurmdPort=$((port + 1))"
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$socket"
    echo "CredType=cred/munge"
    echo "MpiDefault=none"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "ReturnToService=2"
    echo "StateSaveLocation=$t/state"
    echo "SlurmdSpoolDir=$t/spool-%n"
    echo "TmpFS=$t/nodetmp"
    echo "SlurmctldPidFile=$t/slurmctld.pid"
    echo "SlurmdPidFile=$t/slurmd-%n.pid"
    echo "SlurmctldLogFile=$work/slurm-ctld.log"
    echo "SlurmdLogFile=$work/slurm-d-%n.log"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "JobCompType=jobcomp/none"
    echo "SlurmdParameters=config_overrides"
    for ((k = 0; k < _ns_n; k++)); do echo "NodeName=host$k NodeAddr=$sub.$((k + 1)) CPUs=2 State=UNKNOWN"; done
    echo "PartitionName=hosts Nodes=host[0-$((_ns_n - 1))] Default=YES MaxTime=INFINITE State=UP"
  } >"$SLURM_CONF"
  slurmctld -D -i -f "$SLURM_CONF" >>"$work/slurm-ctld.log" 2>&1 &
  _sl_pids+=($!)
  for ((k = 0; k < _ns_n; k++)); do
    mkdir -p "$t/spool-host$k" "$t/nodetmp-$k"
    # shellcheck disable=SC2016
    nsenter --net="/run/netns/${_ns_pre}$k" unshare --uts --mount --propagation private sh -c \
      'hostname "host$1"; mount --bind "$2-$1" "$2" && exec slurmd -D -f "$0"' "$SLURM_CONF" "$k" "$t/nodetmp" \
      >>"$work/slurm-d$k.log" 2>&1 &
    _sl_pids+=($!)
  done
  for _ in $(seq 150); do
    state=$(sinfo -h -o "%T %D" 2>/dev/null)
    [ "$state" = "idle $_ns_n" ] && break
    for p in "${_sl_pids[@]}"; do kill -0 "$p" 2>/dev/null || _sl_skip "a Slurm daemon exited at start"; done
    sleep 0.2
  done
  [ "$state" = "idle $_ns_n" ] || _sl_skip "the $_ns_n nodes are not idle after 30 s (sinfo: ${state:-no answer})"
}
