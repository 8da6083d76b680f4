# Hosts emulated on this machine (sourced by the cluster tests after ../lib.sh):
#   hosts_up N   N "hosts" (2-4): network namespaces pl<id>h0..pl<id>h{N-1}, each with a veth to a bridge of
#                its own (10.77.<id % 200>.0/24, host k at .k+1), its own hostname (host0, host1, ...) in a UTS
#                namespace for each command run in it, names resolved in each (/etc/netns/<namespace>/hosts,
#                removed at exit), and Open MPI pointed at them: a hostfile ($hostfile: host0 slots=2, ...),
#                an rsh agent that runs the remote daemon inside the host's namespaces instead of ssh
#                ($work/rsh), and TCP only on that subnet (OMPI_MCA_*). Exits 77 (said) where namespaces or
#                links cannot be made. Everything is removed at exit.
#   on_host K CMD...   runs CMD on host K (the first host is where mpirun runs).
#   cut_host K         takes host K's link down (a host lost: its ranks can no longer reach the others).
# Traffic goes only between the namespaces and the bridge: no route leaves the subnet.
# shellcheck shell=bash disable=SC2154,SC2034
# ($work, at_exit and fail come from ../lib.sh; $hostfile is for the test that sources this.)
_ns_id=$(($$ % 200))
_ns_pre="pl${_ns_id}h"
_ns_br="plbr${_ns_id}"
_ns_n=0
hosts_down() {
  local k
  for ((k = 0; k < _ns_n; k++)); do
    ip netns pids "${_ns_pre}$k" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    ip link del "plv${_ns_id}x$k" 2>/dev/null
    ip netns del "${_ns_pre}$k" 2>/dev/null
    rm -rf "/etc/netns/${_ns_pre}$k"
  done
  ip link del "$_ns_br" 2>/dev/null
  return 0
}
hosts_up() {
  local n=$1 k subnet="10.77.${_ns_id}"
  at_exit hosts_down
  if ! ip link add "$_ns_br" type bridge 2>"$work/ns_err.txt"; then
    echo "$TEST_NAME: SKIPPED: network namespaces or links cannot be made here: $(cat "$work/ns_err.txt")"
    exit 77
  fi
  ip addr add "$subnet.254/24" dev "$_ns_br" || fail "the bridge's address"
  ip link set "$_ns_br" up || fail "bridge $_ns_br up"
  : >"$work/hostfile"
  for ((k = 0; k < n; k++)); do
    ip netns add "${_ns_pre}$k" || fail "namespace ${_ns_pre}$k"
    _ns_n=$((k + 1))
    ip link add "plv${_ns_id}x$k" type veth peer name eth0 netns "${_ns_pre}$k" || fail "veth of host $k"
    ip link set "plv${_ns_id}x$k" master "$_ns_br" || fail "link of host $k"
    ip link set "plv${_ns_id}x$k" up || fail "link of host $k up"
    ip netns exec "${_ns_pre}$k" ip addr add "$subnet.$((k + 1))/24" dev eth0 || fail "address of host $k"
    ip netns exec "${_ns_pre}$k" ip link set eth0 up || fail "eth0 up in host $k"
    ip netns exec "${_ns_pre}$k" ip link set lo up || fail "lo up in host $k"
    echo "host$k slots=2" >>"$work/hostfile"
  done
  # Each host resolves the others by name: `ip netns exec` binds /etc/netns/<namespace>/hosts over /etc/hosts.
  for ((k = 0; k < n; k++)); do
    mkdir -p "/etc/netns/${_ns_pre}$k" || fail "/etc/netns/${_ns_pre}$k"
    { printf '127.0.0.1 localhost\n'; for ((j = 0; j < n; j++)); do printf '%s host%d\n' "$subnet.$((j + 1))" "$j"; done; } \
      >"/etc/netns/${_ns_pre}$k/hosts"
  done
  hostfile=$work/hostfile
  cat >"$work/rsh" <<RSH
#!/bin/sh
# Open MPI's rsh agent here: the remote daemon of hostK runs in its namespaces.
host=\$1; shift
k=\${host#host}
exec ip netns exec ${_ns_pre}\$k unshare --uts sh -c "hostname host\$k; \$*"
RSH
  chmod +x "$work/rsh"
  export OMPI_MCA_plm_rsh_agent="$work/rsh" OMPI_MCA_oob_tcp_if_include="$subnet.0/24"
  export OMPI_MCA_btl_tcp_if_include="$subnet.0/24" OMPI_MCA_btl=tcp,self
}
on_host() {
  local k=$1
  shift
  # shellcheck disable=SC2016
  ip netns exec "${_ns_pre}$k" unshare --uts sh -c 'hostname "host$0"; exec "$@"' "$k" "$@"
}
cut_host() {
  ip link set "plv${_ns_id}x$1" down
}
