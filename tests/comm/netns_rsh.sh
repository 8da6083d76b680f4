#!/bin/sh
# Open MPI's remote-start agent for the two-host test: instead of ssh, enter
# the network namespace that owns the address and run the command there with
# its own host name. Called as: netns_rsh.sh [ssh options] HOST COMMAND...
while [ "${1#-}" != "$1" ]; do shift; done  # drop ssh-style options
host=$1
shift
case "$host" in
  10.77.0.1 | node-a) ns=pl_node_a name=node-a ;;
  10.77.0.2 | node-b) ns=pl_node_b name=node-b ;;
  *) echo "netns_rsh.sh: unknown host $host" >&2; exit 255 ;;
esac
exec ip netns exec "$ns" unshare --uts sh -c "hostname $name && $*"
