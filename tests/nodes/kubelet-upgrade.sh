#!/bin/sh
# The upgrade image's program (slipway.test/kubelet-upgrade:<version>; busybox sh): replaces a test
# node's kubelet with the build of VERSION that the image carries and restarts it, the way
# k3s-upgrade replaces and restarts k3s. Run it in a Plan's upgrade container, which is privileged,
# on the host's PID namespace, with the host's root mounted at /host (as every SUC/slipway Job is).
#
#   kubelet-upgrade [upgrade] [VERSION]
#   kubelet-upgrade prepare SERVER_PLAN
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
#
# `prepare SERVER_PLAN` is what k3s-upgrade's (and rke2-upgrade's) prepare step does for an agent
# Plan, with the same API calls as the Job's ServiceAccount (the image's kubectl, in-cluster): GET
# the Plan SERVER_PLAN in the Job's namespace until it exists, then until its status.applying is
# empty, then LIST the control-plane nodes until every one reports SYSTEM_UPGRADE_PLAN_LATEST_VERSION
# ('+' read as '-'). k3s-upgrade throws kubectl's errors away; here they are logged (a refused
# call then says so in the Job's log), but the calls and the waiting are the same.
set -eu
log() { echo "kubelet-upgrade: $*"; }

prepare() {
  plan=${1:?prepare needs the name of the server Plan}
  want=${SYSTEM_UPGRADE_PLAN_LATEST_VERSION:?prepare needs SYSTEM_UPGRADE_PLAN_LATEST_VERSION}
  ns=$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)
  while [ -z "$(kubectl get plan "$plan" -n "$ns" -o jsonpath='{.metadata.name}' || true)" ]; do
    log "waiting for control-plane Plan $plan to be created"
    sleep 5
  done
  while [ -n "$(kubectl get plan "$plan" -n "$ns" -o jsonpath='{.status.applying}' || echo refused)" ]; do
    log "waiting for the control-plane Plan $plan to finish applying"
    sleep 5
  done
  while :; do
    versions=$(kubectl get nodes --selector=node-role.kubernetes.io/control-plane \
      -o jsonpath='{range .items[*]}{.status.nodeInfo.kubeletVersion}{"\n"}{end}' | sort -u | tr + -) || versions=""
    [ "$versions" = "$want" ] && break
    log "waiting for every control-plane node at $want (they report: $(echo "$versions" | tr '\n' ' '))"
    sleep 5
  done
  log "every control-plane node reports $want"
}

if [ "${1:-}" = prepare ]; then
  shift
  prepare "$@"
  exit 0
fi
[ "${1:-}" = upgrade ] && shift
version=${1:-${SYSTEM_UPGRADE_PLAN_LATEST_VERSION:-}}
host=${HOST_ROOT:-/host}
path=${KUBELET_PATH:-/usr/local/bin/kubelet}

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
