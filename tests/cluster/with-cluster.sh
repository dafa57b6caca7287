#!/usr/bin/env bash
# Runs a command against a fresh local cluster of 3 nodes, shared by everything the command starts
# (SLIPWAY_TEST_KUBECONFIG points at it), and tears the cluster down afterwards.
#
#   tests/cluster/with-cluster.sh cargo test --locked
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/build.sh" >/dev/null
dir=$(mktemp -d /tmp/slipway-test.XXXXXX)
trap '"$here/down.sh" "$dir" >/dev/null 2>&1 || true' EXIT
SLIPWAY_CLUSTER_DIR="$dir" SLIPWAY_CLUSTER_OWNER_PID=$$ "$here/up.sh" 3 >/dev/null
rc=0
SLIPWAY_TEST_KUBECONFIG="$dir/kubeconfig" "$@" || rc=$?
# A failed command's cluster goes with it; its logs (the API server's audit log above all: who
# asked what, when) and the real guests' consoles stay, the last failure's only, for whoever
# reads the failure afterwards (SLIPWAY_CLUSTER_FAILED_LOGS, default /tmp/slipway-failed-cluster).
if [ "$rc" -ne 0 ]; then
  kept=${SLIPWAY_CLUSTER_FAILED_LOGS:-/tmp/slipway-failed-cluster}
  rm -rf "$kept" && mkdir -p "$kept"
  cp -r "$dir/logs" "$kept/" 2>/dev/null || true
  for console in "$dir"/guests/*/console.log; do
    [ -f "$console" ] && cp "$console" "$kept/$(basename "$(dirname "$console")")-console.log"
  done
  echo "cluster: the command failed (exit $rc); its cluster's logs are kept in $kept" >&2
fi
exit "$rc"
