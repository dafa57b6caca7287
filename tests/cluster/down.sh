#!/usr/bin/env bash
# Stops a local test cluster started by up.sh and removes its directory.
#
#   tests/cluster/down.sh [DIR]
#
# DIR defaults to $SLIPWAY_CLUSTER_DIR, else the directory of $KUBECONFIG if that is a cluster
# directory made by up.sh. Only the PIDs recorded in DIR/pids are signalled (SIGTERM, SIGKILL after
# 5 s, in reverse start order), and only while their command line still points into DIR.
# SLIPWAY_CLUSTER_KEEP=1 keeps the directory (logs) after stopping the processes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

dir=${1:-${SLIPWAY_CLUSTER_DIR:-}}
if [ -z "$dir" ] && [ -n "${KUBECONFIG:-}" ] && [ -e "$(dirname "$KUBECONFIG")/.slipway-cluster" ]; then
  dir=$(dirname "$KUBECONFIG")
fi
if [ -z "$dir" ]; then
  cluster_log "usage: $0 DIR   (the directory up.sh printed; its kubeconfig is DIR/kubeconfig)"
  exit 2
fi
if [ ! -d "$dir" ]; then
  cluster_log "$dir does not exist; nothing to stop"
  exit 0
fi
dir=$(cd "$dir" && pwd)
if [ ! -e "$dir/.slipway-cluster" ]; then
  cluster_log "$dir was not made by up.sh (no .slipway-cluster marker); refusing to touch it"
  exit 2
fi

failed=false

# The reaper first (unless this script is the reaper: it execs down.sh, keeping its PID).
if [ -f "$dir/reaper.pid" ]; then
  reaper=$(cat "$dir/reaper.pid")
  if [ "$reaper" != "$$" ]; then
    stop_pid "$reaper" reaper "$dir" || failed=true
  fi
fi

# Components in reverse start order, then anything else recorded.
order=()
for ((i = ${#CLUSTER_COMPONENTS[@]} - 1; i >= 0; i--)); do
  order+=("${CLUSTER_COMPONENTS[i]}")
done
for f in "$dir"/pids/*.pid; do
  [ -e "$f" ] || continue
  name=$(basename "$f" .pid)
  case " ${CLUSTER_COMPONENTS[*]} " in
  *" $name "*) ;;
  *) order=("$name" "${order[@]}") ;;
  esac
done
for name in "${order[@]}"; do
  f="$dir/pids/$name.pid"
  [ -f "$f" ] || continue
  stop_pid "$(cat "$f")" "$name" "$dir" || failed=true
done

if [ "$failed" = true ]; then
  cluster_log "some processes of $dir could not be stopped; keeping the directory"
  exit 1
fi
if [ "${SLIPWAY_CLUSTER_KEEP:-}" = 1 ]; then
  cluster_log "stopped; kept $dir"
else
  rm -rf "$dir"
  cluster_log "stopped and removed $dir"
fi
