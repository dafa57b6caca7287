#!/usr/bin/env bash
# Starts an OCI registry (distribution's, plain HTTP) on the host's loopback, once per directory,
# and prints its port. scripts/publish.sh pushes a release to it; nodes given
# `--registry-mirror ghcr.io=PORT` (tests/nodes/up.sh) pull the published names from it.
#
#   tests/tools/registry/up.sh DIR
#
# The registry's files go to DIR/registry, its pid to DIR/pids/registry.pid: for a cluster's
# directory (tests/cluster/up.sh), down.sh stops it with the cluster. A second call with the same
# DIR prints the running registry's port.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../cluster/lib.sh
source "$here/../../cluster/lib.sh"
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
mkdir -p "$1"
dir=$(cd "$1" && pwd)
bin=$("$here/build.sh" | tail -n 1)
reg="$dir/registry"
mkdir -p "$reg" "$dir/pids"
exec 8>"$reg/.lock"
flock 8

up() { curl -fsS -o /dev/null "http://127.0.0.1:$1/v2/" 2>/dev/null; }
port=$(cat "$reg/port" 2>/dev/null || true)
if [ -z "$port" ] || ! up "$port"; then
  # Below the ephemeral range: a guest's forward connects to it again after every reboot.
  port=$(lasting_free_port)
  cat >"$reg/config.yml" <<YAML
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $reg/storage
http:
  addr: 127.0.0.1:$port
  secret: slipway-test-registry
YAML
  start=$SECONDS
  setsid "$bin/registry" serve "$reg/config.yml" </dev/null >>"$reg/registry.log" 2>&1 8>&- &
  echo $! >"$dir/pids/registry.pid"
  for _ in $(seq 1 100); do
    up "$port" && break
    sleep 0.1
  done
  up "$port" || { echo "registry: not answering on 127.0.0.1:$port (log: $reg/registry.log)" >&2; exit 1; }
  echo "$port" >"$reg/port"
  echo "registry: up on 127.0.0.1:$port in $((SECONDS - start))s" >&2
fi

echo "$port"
