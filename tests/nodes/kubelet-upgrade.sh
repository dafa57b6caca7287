#!/bin/sh
# The upgrade image's program (slipway.test/kubelet-upgrade:<version>; busybox sh): replaces a test
# node's kubelet with the build of VERSION that the image carries and restarts it, the way
# k3s-upgrade replaces and restarts k3s. Run it in a Plan's upgrade container, which is privileged,
# on the host's PID namespace, with the host's root mounted at /host (as every SUC/slipway Job is).
#
#   kubelet-upgrade [upgrade] [VERSION]
#
# VERSION: the argument, else SYSTEM_UPGRADE_PLAN_LATEST_VERSION (which the controller sets from
# the Plan's version), else the image's tag cannot be known: an error. The image carries
# /kubelets/<version>/kubelet for every version in tests/nodes/versions.env.
# Environment: HOST_ROOT (default /host), KUBELET_PATH (the kubelet's path on the host, default
# /usr/local/bin/kubelet).
# What it does: copies the new binary next to the old one and renames it over it (the running
# kubelet keeps its deleted file), then finds the kubelet in /host/proc (comm "kubelet") and sends
# it SIGTERM; systemd (Restart=always) starts the new binary and the node then reports the new
# status.nodeInfo.kubeletVersion. If the host already has that exact binary it changes nothing.
set -eu
[ "${1:-}" = upgrade ] && shift
version=${1:-${SYSTEM_UPGRADE_PLAN_LATEST_VERSION:-}}
host=${HOST_ROOT:-/host}
path=${KUBELET_PATH:-/usr/local/bin/kubelet}
log() { echo "kubelet-upgrade: $*"; }

[ -n "$version" ] || { log "no version: pass one or set SYSTEM_UPGRADE_PLAN_LATEST_VERSION"; exit 2; }
new=/kubelets/$version/kubelet
[ -x "$new" ] || { log "this image has no kubelet $version (it has: $(echo /kubelets/*/ | tr -d /| sed 's/kubelets//g'))"; exit 2; }
[ -d "$host/proc" ] || { log "the host's root is not mounted at $host"; exit 2; }
[ -f "$host$path" ] || { log "no kubelet at $host$path"; exit 2; }

old=$("$host$path" --version 2>/dev/null || echo unknown)
if cmp -s "$new" "$host$path"; then
  log "$path is already the kubelet $version ($old); nothing to do"
  exit 0
fi
cp "$new" "$host$path.new"
chmod 755 "$host$path.new"
mv -f "$host$path.new" "$host$path"
sync
log "replaced $path ($old) with the kubelet $version"

pids=""
for d in "$host"/proc/[0-9]*; do
  [ "$(cat "$d/comm" 2>/dev/null)" = kubelet ] && pids="$pids ${d##*/}"
done
[ -n "$pids" ] || { log "no kubelet process found in $host/proc; it will start the new binary when it starts"; exit 0; }
for pid in $pids; do
  log "sending SIGTERM to the kubelet (pid $pid); systemd starts $version"
  kill -TERM "$pid"
done
