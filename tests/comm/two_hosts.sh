#!/bin/bash
# A job across two "hosts" on this machine: two network namespaces joined by
# a veth pair (10.77.0.1 and 10.77.0.2), each with its own host name.
# `parallm launch --hostfile` starts one rank in each through Open MPI, whose
# remote agent enters the other namespace (netns_rsh.sh) instead of ssh.
# MPI is held to TCP (btl self,tcp), so the data really crosses the veth
# link, and parallm must find 2 nodes from the host names.
# Usage: two_hosts.sh PARALLM. Exit 77 (skipped) without the privileges.
set -u
parallm=$(readlink -f "$1")
here=$(dirname "$(readlink -f "$0")")
if ! ip netns add pl_node_a 2>/dev/null; then
  echo "two_hosts: cannot create network namespaces here (needs root / CAP_SYS_ADMIN): skipped"
  exit 77
fi
ip netns add pl_node_b
cleanup() {
  ip netns del pl_node_a 2>/dev/null
  ip netns del pl_node_b 2>/dev/null
  rm -rf "$tmp"
}
tmp=$(mktemp -d)
trap cleanup EXIT
set -e
ip link add pl_veth_a netns pl_node_a type veth peer name pl_veth_b netns pl_node_b
ip -n pl_node_a addr add 10.77.0.1/24 dev pl_veth_a
ip -n pl_node_b addr add 10.77.0.2/24 dev pl_veth_b
for ns in pl_node_a pl_node_b; do ip -n $ns link set lo up; done
ip -n pl_node_a link set pl_veth_a up
ip -n pl_node_b link set pl_veth_b up
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' >"$tmp/hosts"
set +e
export OMPI_MCA_plm_rsh_agent="$here/netns_rsh.sh"
export OMPI_MCA_btl=self,tcp
export OMPI_MCA_btl_tcp_if_include=10.77.0.0/24
export OMPI_MCA_oob_tcp_if_include=10.77.0.0/24
export OMP_NUM_THREADS=1
run() { ip netns exec pl_node_a unshare --uts sh -c "hostname node-a && $*"; }
run "$parallm" launch --hostfile "$tmp/hosts" -- "$parallm" doctor --timeout 20 2>&1 | tee "$tmp/doctor.txt"
run "$parallm" launch --hostfile "$tmp/hosts" -- "$parallm" bench comm --check -b 1K -e 4M -f 16 -n 3 --rounds 2 \
  --timeout 20 2>&1 | tee "$tmp/bench.txt"
ok=0
grep -q "world size 2, 2 nodes" "$tmp/doctor.txt" || { echo "two_hosts: parallm did not find 2 nodes"; ok=1; }
grep -q "\[node-a-0\] is OK (global rank 0/2)" "$tmp/doctor.txt" || { echo "two_hosts: node-a not OK"; ok=1; }
grep -q "\[node-b-0\] is OK (global rank 1/2)" "$tmp/doctor.txt" || { echo "two_hosts: node-b not OK"; ok=1; }
grep -q "check: all results correct" "$tmp/bench.txt" || { echo "two_hosts: collectives over TCP wrong"; ok=1; }
[ $ok = 0 ] && echo "two_hosts: PASS (doctor and checked collectives across two namespaces over TCP)"
exit $ok
