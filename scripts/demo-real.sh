#!/usr/bin/env bash
# `./dev demo real`: the demo on real nodes. A local cluster whose two workers are QEMU guests
# (tests/nodes/: Debian with systemd, containerd and a real kubelet), slipway as a process, and two
# Plans one after the other: one replaces each node's kubelet (v1.34.1 to v1.34.2, with
# slipway.test/kubelet-upgrade, as k3s-upgrade replaces k3s), one reboots each node for real
# (`spec.reboot`, cordoned meanwhile). Each node's readiness, kubelet version, boot ID and cordon
# are printed whenever they change. Everything started here is stopped on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
begun=$SECONDS

say "Building slipway"
cargo build --locked --quiet

say "Starting a local cluster without fake nodes (the first run builds Kubernetes from source: ~20 minutes)"
export SLIPWAY_CLUSTER_DIR
SLIPWAY_CLUSTER_DIR=$(mktemp -d /tmp/slipway-demo-real.XXXXXX)
dir=$SLIPWAY_CLUSTER_DIR
controller_pid=""
cleanup() {
  [ -n "$controller_pid" ] && kill "$controller_pid" 2>/dev/null && wait "$controller_pid" 2>/dev/null
  # Stops the guests with the cluster.
  bash tests/cluster/down.sh "$dir" >/dev/null 2>&1 || true
}
trap cleanup EXIT
eval "$(bash tests/cluster/up.sh 0 | tail -n 1)"

nodes=(node-1 node-2)
say "Booting ${nodes[*]}: QEMU guests joining the cluster, side by side (no KVM here: minutes; the first run also builds the guest image)"
pids=()
for n in "${nodes[@]}"; do
  bash tests/nodes/up.sh "$dir" "$n" >"$dir/logs/guest-$n-up.log" 2>&1 &
  pids+=($!)
done
for i in "${!nodes[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "${nodes[$i]} did not come up; its log ($dir/logs/guest-${nodes[$i]}-up.log):" >&2
    tail -n 30 "$dir/logs/guest-${nodes[$i]}-up.log" >&2
    exit 1
  fi
done
echo "both Ready after $((SECONDS - begun))s"
kubectl get nodes -o wide

say "Running slipway in namespace system-upgrade (log: $dir/slipway.log)"
kubectl create namespace system-upgrade >/dev/null
# The reboot Plan's Jobs cordon their node with this account, as SUC's Jobs do.
kubectl apply -f - >/dev/null <<'RBAC'
apiVersion: v1
kind: ServiceAccount
metadata: {name: upgrader, namespace: system-upgrade}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: demo-upgrader}
rules:
- {apiGroups: [""], resources: [nodes], verbs: [get, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: demo-upgrader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: demo-upgrader}
subjects: [{kind: ServiceAccount, name: upgrader, namespace: system-upgrade}]
RBAC
"${CARGO_TARGET_DIR:-target}/debug/slipway" run --kubeconfig "$KUBECONFIG" --namespace system-upgrade --metrics-addr 127.0.0.1:0 \
  >"$dir/slipway.log" 2>&1 &
controller_pid=$!
for _ in $(seq 60); do
  kubectl get crd plans.upgrade.cattle.io >/dev/null 2>&1 && break
  sleep 1
done
kubectl wait --for=condition=Established crd/plans.upgrade.cattle.io --timeout=60s >/dev/null

columns='NODE:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status'
columns+=',KUBELET:.status.nodeInfo.kubeletVersion,BOOT-ID:.status.nodeInfo.bootID'
columns+=',CORDONED:.spec.unschedulable'

# Follows Plan $1 until it is Complete: the nodes' columns, and what each applying node does,
# printed with the time whenever they change (a `kubectl get -w` that leaves out the heartbeats).
follow() {
  local plan=$1 deadline=$((SECONDS + 900)) last="" now line
  printf '%s\n' "TIME      $(kubectl get nodes -o custom-columns="$columns" | head -n 1)"
  while :; do
    now=$(kubectl get nodes --no-headers -o custom-columns="$columns"
      kubectl -n system-upgrade get plan "$plan" \
        -o jsonpath='{range .status.nodes[*]}  plan '"$plan"': {.name} {.phase} {.message}{"\n"}{end}')
    if [ "$now" != "$last" ]; then
      while IFS= read -r line; do printf '%s  %s\n' "$(date +%T)" "$line"; done <<<"$now"
      last=$now
    fi
    if kubectl -n system-upgrade wait --for=condition=Complete "plan/$plan" --timeout=0 >/dev/null 2>&1; then
      break
    fi
    if [ $SECONDS -gt $deadline ]; then
      echo "Plan $plan did not complete in 15 minutes; slipway's log:" >&2
      tail -n 50 "$dir/slipway.log" >&2
      exit 1
    fi
    sleep 2
  done
}

say "Plan kubelet: replace each node's kubelet with v1.34.2, one node at a time"
started=$SECONDS
kubectl apply -f - <<'PLAN'
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata: {name: kubelet, namespace: system-upgrade}
spec:
  concurrency: 1
  version: v1.34.2
  nodeSelector:
    matchExpressions:
    - {key: kubernetes.io/os, operator: In, values: [linux]}
  upgrade:
    # Copies the kubelet of the Plan's version over the host's and restarts it (SIGTERM; systemd
    # starts the new binary), as rancher/k3s-upgrade does with k3s.
    image: slipway.test/kubelet-upgrade
PLAN
follow kubelet
echo "every node runs kubelet v1.34.2, $((SECONDS - started))s after the Plan"

say "Plan reboot: reboot each node for real, one at a time; the next starts once the last is back Ready with a new boot ID"
started=$SECONDS
kubectl apply -f - <<'PLAN'
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata: {name: reboot, namespace: system-upgrade}
spec:
  concurrency: 1
  version: "1"
  cordon: true
  serviceAccountName: upgrader
  nodeSelector:
    matchExpressions:
    - {key: kubernetes.io/os, operator: In, values: [linux]}
  upgrade:
    image: busybox:1.37
    command: [sh, -c, 'echo "the upgrade that needs a reboot, on $SYSTEM_UPGRADE_NODE_NAME"']
  reboot:
    timeout: 10m
PLAN
follow reboot
echo "every node rebooted and is back, $((SECONDS - started))s after the Plan"

say "Done in $((SECONDS - begun))s. The Plans' events:"
kubectl -n system-upgrade get events --sort-by=.lastTimestamp \
  -o custom-columns='OBJECT:.involvedObject.name,REASON:.reason,MESSAGE:.message' 2>/dev/null |
  grep -E '^(OBJECT|kubelet|reboot) ' || true
kubectl get nodes -o wide
