#!/usr/bin/env bash
# Starts a real test node again from its own disk after tests/nodes/kill.sh (or after it powered
# off), and by default waits until the node is Ready (without a not-ready or unreachable taint)
# with a new boot ID.
#
#   tests/nodes/start.sh CLUSTER_DIR NAME [--no-wait]
#
# Environment: SLIPWAY_NODES_TIMEOUT (seconds to wait, default 600), SLIPWAY_NODES_VERBOSE=1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

if [ $# -lt 2 ] || [ $# -gt 3 ] || { [ $# -eq 3 ] && [ "$3" != --no-wait ]; }; then
  nodes_log "usage: $0 CLUSTER_DIR NAME [--no-wait]"
  exit 2
fi
dir=$(cd "$1" && pwd) name=$2 wait=true
[ "${3:-}" = --no-wait ] && wait=false
guest_env "$dir" "$name"
if pid=$(guest_pid "$dir" "$name"); then
  nodes_die "node $name is running (QEMU pid $pid); tests/nodes/kill.sh stops it"
fi
cluster_bin=$("$cluster_scripts/build.sh" | tail -n 1)
old=$(KUBECONFIG="$dir/kubeconfig" node_state "$cluster_bin/kubectl" "$name" | cut -d' ' -f1)
start_guest "$dir" "$name"
nodes_log "started $name again (QEMU pid $(cat "$dir/pids/guest-$name.pid"))"
start=$SECONDS
if [ "$wait" = true ]; then
  wait_guest_ready "$dir" "$name" "${SLIPWAY_NODES_TIMEOUT:-600}" "${old:-none}"
  nodes_log "node $name Ready with a new boot ID $((SECONDS - start))s after QEMU started"
fi
