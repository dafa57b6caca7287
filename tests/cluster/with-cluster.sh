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
SLIPWAY_TEST_KUBECONFIG="$dir/kubeconfig" "$@"
