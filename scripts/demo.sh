#!/usr/bin/env bash
# The README's first command: start a local cluster of 5 fake nodes, run slipway against it, apply
# a Plan, and show the rollout node by node until the Plan is Complete. Everything started here is
# stopped on exit. `scripts/demo.sh real` (`./dev demo real`) is the demo on real nodes instead:
# scripts/demo-real.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
case "${1:-}" in
  "") ;;
  real) exec bash scripts/demo-real.sh ;;
  *) echo "usage: $0 [real]" >&2; exit 2 ;;
esac

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "Building slipway"
cargo build --locked --quiet

say "Starting a local cluster with 5 nodes (the first run builds Kubernetes from source: ~20 minutes)"
export SLIPWAY_CLUSTER_DIR
SLIPWAY_CLUSTER_DIR=$(mktemp -d /tmp/slipway-demo.XXXXXX)
controller_pid=""
cleanup() {
  [ -n "$controller_pid" ] && kill "$controller_pid" 2>/dev/null && wait "$controller_pid" 2>/dev/null
  bash tests/cluster/down.sh "$SLIPWAY_CLUSTER_DIR" >/dev/null 2>&1 || true
}
trap cleanup EXIT
eval "$(bash tests/cluster/up.sh 5 | tail -n 1)"
kubectl get nodes -L node-role.kubernetes.io/control-plane

say "Running slipway in namespace system-upgrade (log: $SLIPWAY_CLUSTER_DIR/slipway.log)"
kubectl create namespace system-upgrade >/dev/null
./target/debug/slipway run --kubeconfig "$KUBECONFIG" --namespace system-upgrade --metrics-addr 127.0.0.1:0 \
  >"$SLIPWAY_CLUSTER_DIR/slipway.log" 2>&1 &
controller_pid=$!
for _ in $(seq 60); do
  kubectl get crd plans.upgrade.cattle.io >/dev/null 2>&1 && break
  sleep 1
done
kubectl wait --for=condition=Established crd/plans.upgrade.cattle.io --timeout=60s >/dev/null

say "Applying a Plan: upgrade every node to v1.30.1+k3s1, two nodes at a time"
kubectl apply -f - <<'PLAN'
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: demo
  namespace: system-upgrade
  annotations:
    # Read by the local cluster's fake kubelet (kwok): each upgrade pod finishes after this long.
    slipway.test/complete-delay: "4s"
spec:
  concurrency: 2
  version: v1.30.1+k3s1
  nodeSelector:
    matchExpressions:
    - {key: kubernetes.io/os, operator: In, values: [linux]}
  upgrade:
    image: rancher/k3s-upgrade
PLAN

say "Rollout (every 2s: each node's plan label, then the Plan and what its applying nodes do)"
deadline=$((SECONDS + 180))
while :; do
  echo "--- $(date +%T)"
  kubectl get nodes -L plan.upgrade.cattle.io/demo --no-headers \
    -o custom-columns='NODE:.metadata.name,DONE-HASH:.metadata.labels.plan\.upgrade\.cattle\.io/demo'
  kubectl -n system-upgrade get plan demo -o wide --no-headers
  kubectl -n system-upgrade get plan demo \
    -o jsonpath='{range .status.nodes[*]}  {.name}: {.phase} {.job}{"\n"}{end}'
  if kubectl -n system-upgrade wait --for=condition=Complete plan/demo --timeout=0 >/dev/null 2>&1; then
    break
  fi
  if [ $SECONDS -gt $deadline ]; then
    echo "the demo Plan did not complete in 3 minutes; slipway's log:" >&2
    tail -n 50 "$SLIPWAY_CLUSTER_DIR/slipway.log" >&2
    exit 1
  fi
  sleep 2
done

say "Complete. Every node carries the Plan's latestHash:"
kubectl -n system-upgrade get plan demo -o jsonpath='{.status.latestHash}{"\n"}'
kubectl get nodes -L plan.upgrade.cattle.io/demo
say "Events of the Plan"
kubectl -n system-upgrade get events --field-selector involvedObject.name=demo --sort-by=.lastTimestamp \
  -o custom-columns='REASON:.reason,MESSAGE:.message' 2>/dev/null || true
