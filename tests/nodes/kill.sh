#!/usr/bin/env bash
# Kills a real test node's QEMU at once (SIGKILL: a power cut, for fault tests). Its disk stays;
# tests/nodes/start.sh boots it again from the same disk.
#
#   tests/nodes/kill.sh CLUSTER_DIR NAME
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

[ $# -eq 2 ] || { nodes_log "usage: $0 CLUSTER_DIR NAME"; exit 2; }
dir=$(cd "$1" && pwd) name=$2
guest_env "$dir" "$name"
if ! pid=$(guest_pid "$dir" "$name"); then
  nodes_log "node $name is not running"
  exit 0
fi
kill -KILL "$pid"
for _ in $(seq 1 100); do
  pid_is_ours "$pid" "$dir" || break
  sleep 0.1
done
pid_is_ours "$pid" "$dir" && nodes_die "QEMU of $name (pid $pid) is still alive after SIGKILL"
rm -f "$dir/pids/guest-$name.pid"
echo "---- $(date -u +%FT%TZ) killed (SIGKILL) ----" >>"$dir/guests/$name/console.log"
nodes_log "killed node $name (QEMU pid $pid)"
