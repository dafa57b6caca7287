#!/usr/bin/env bash
# Runs SUC's own end-to-end suite (build.sh), every assertion as SUC wrote it, against a controller
# under test run as a process (slipway, or SUC itself: tests/compat/build.sh).
#
#   tests/suc-e2e/run.sh CONTROLLER [SUITE FLAGS...]     e.g. -ginkgo.focus='Plan Resolution'
#   SLIPWAY_SUC_E2E_ARGS=run tests/suc-e2e/run.sh target/debug/slipway
#
# SUC's framework deploys, in each spec's namespace, a Deployment of rancher/system-upgrade-controller
# (SYSTEM_UPGRADE_CONTROLLER_{NAME,NAMESPACE,NODE_NAME,LEADER_ELECT,DEBUG}) with a ServiceAccount
# bound to cluster-admin, and waits for it to be available. kwok makes that pod "run";
# controllers.py starts CONTROLLER for it with the same environment and the cluster's admin
# kubeconfig, and stops it when the spec's namespace goes.
#
# Environment:
#   SLIPWAY_SUC_E2E_KUBECONFIG  an existing cluster (kwok nodes; one worker without the
#                               control-plane label, as SUC's CI: a k3s server and one agent)
#                               instead of a fresh one of tests/cluster with kwok-stages-sh.yaml
#   SLIPWAY_SUC_E2E_NODES       nodes of the fresh cluster (default 2: node-1 control-plane, node-2)
#   SLIPWAY_SUC_E2E_DIR         where the logs go (default: a new /tmp/slipway-suc-e2e.XXXXXX)
#   SLIPWAY_SUC_E2E_ARGS        arguments of every controller process (slipway: run; SUC: none)
#   SLIPWAY_SUC_E2E_ENV         extra K=V words for every controller process (run.sh adds
#                               SLIPWAY_METRICS_ADDR=127.0.0.1:0: several may run at once)
#   SLIPWAY_SUC_E2E_CRD=suc     the Plan CRD is SUC's own (tests/suc/, as where SUC's chart or
#                               Rancher owns it), installed before the suite with slipway's
#                               DisruptionBudget CRD, and the controllers run with
#                               SLIPWAY_INSTALL_CRD=false; by default the controller under test
#                               registers its own
#
# After the suite, every namespace must be gone within three minutes: one left Terminating holds a
# finalizer no controller is left to remove (the framework deletes each spec's namespace, its
# controller's Deployment with it). On SUC's CRD, slipway (SLIPWAY_SUC_E2E_ARGS=run) is then shown
# a Plan of its own applied with slipway's fields: the Plan must say, in its condition
# FieldsPruned, which of them SUC's CRD dropped.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cluster_src=$(cd "$here/../cluster" && pwd)
[ $# -ge 1 ] || { echo "usage: $0 CONTROLLER [SUITE FLAGS...]" >&2; exit 2; }
controller=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
[ -x "$controller" ] || { echo "suc-e2e: $controller is not an executable" >&2; exit 2; }
suite=$("$here/build.sh" | tail -n 1)

work=${SLIPWAY_SUC_E2E_DIR:-$(mktemp -d /tmp/slipway-suc-e2e.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
log() { echo "suc-e2e: $*" >&2; }

shim=""
cluster_dir=""
cleanup() {
  if [ -n "$shim" ]; then kill "$shim" 2>/dev/null || true; wait "$shim" 2>/dev/null || true; fi
  if [ -n "$cluster_dir" ]; then SLIPWAY_CLUSTER_KEEP=1 "$work/cluster-scripts/down.sh" "$cluster_dir" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

if [ -n "${SLIPWAY_SUC_E2E_KUBECONFIG:-}" ]; then
  kubeconfig=$SLIPWAY_SUC_E2E_KUBECONFIG
else
  # tests/cluster as it is, but for kwok's stages: its own, plus kwok-stages-sh.yaml, with
  # pod-complete kept off the pods those stages take.
  scripts="$work/cluster-scripts"
  mkdir -p "$scripts"
  for f in "$cluster_src"/*; do ln -sfn "$f" "$scripts/$(basename "$f")"; done
  rm -f "$scripts/kwok-stages.yaml"
  python3 - "$cluster_src/kwok-stages.yaml" "$here/kwok-stages-sh.yaml" >"$scripts/kwok-stages.yaml" <<'EOF'
import re, sys
base, extra = (open(p).read() for p in sys.argv[1:3])
guards = "".join(
    "    - key: '[.spec.containers.[] | select(.command == [\"sh\", \"-c\"]) | (.args // [\"\"])[0]"
    f" | test(\"{rx}\")] | any'\n      operator: 'NotIn'\n      values:\n      - 'true'\n"
    for rx in ("^exit [1-9][0-9]*$", "^sleep [0-9]+$"))
docs = re.split(r"(?m)^---\n", base)
hits = 0
for i, d in enumerate(docs):
    if re.search(r"(?m)^  name: pod-complete$", d):
        docs[i] = d.replace("    matchExpressions:\n", "    matchExpressions:\n" + guards, 1)
        hits += 1
if hits != 1:
    sys.exit("kwok-stages.yaml: expected one pod-complete stage, found %d" % hits)
sys.stdout.write("---\n".join(docs).rstrip("\n") + "\n" + "---\n" + extra.split("\n---\n", 1)[1])
EOF
  cluster_dir="$work/cluster"
  log "starting a cluster of ${SLIPWAY_SUC_E2E_NODES:-2} nodes in $cluster_dir"
  SLIPWAY_CLUSTER_DIR="$cluster_dir" SLIPWAY_CLUSTER_OWNER_PID=$$ \
    "$scripts/up.sh" "${SLIPWAY_SUC_E2E_NODES:-2}" >/dev/null
  kubeconfig="$cluster_dir/kubeconfig"
fi
kc=(kubectl --kubeconfig="$kubeconfig")

# shellcheck disable=SC2206 # words
extra_env=(SLIPWAY_METRICS_ADDR=127.0.0.1:0 ${SLIPWAY_SUC_E2E_ENV:-})
# shellcheck disable=SC2206 # words
controller_args=(${SLIPWAY_SUC_E2E_ARGS:-})

# established CRD... : waits up to a minute until each CRD is Established. Retried: `kubectl wait`
# takes a CRD read just after its creation, with `status.conditions: null`, for an error.
established() {
  local deadline=$((SECONDS + 60))
  until "${kc[@]}" wait --for=condition=Established --timeout=10s "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      "${kc[@]}" wait --for=condition=Established --timeout=1s "$@" >&2
      return 1
    fi
    sleep 1
  done
}

if [ "${SLIPWAY_SUC_E2E_CRD:-}" = suc ]; then
  log "installing SUC's Plan CRD (and slipway's DisruptionBudget CRD)"
  "${kc[@]}" apply --server-side -f "$here/../suc/upgrade.cattle.io_plans.yaml" \
    -f "$here/../../crds/disruptionbudgets.slipway.dev.yaml" >/dev/null
  established crd/plans.upgrade.cattle.io crd/disruptionbudgets.slipway.dev
  extra_env+=(SLIPWAY_INSTALL_CRD=false)
fi

# The Plan CRD is the controller's own (SUC and slipway both register it at start). In SUC's CI it
# exists before a spec creates a Plan: its controller pod starts before the Deployment counts as
# available. Here a Deployment is available as soon as kwok marks its pod ready, so the controller
# under test registers its CRD once, before the suite, in a namespace of its own.
if ! "${kc[@]}" get crd plans.upgrade.cattle.io >/dev/null 2>&1; then
  log "letting $controller register its CRD"
  "${kc[@]}" create namespace suc-e2e-bootstrap >/dev/null
  env -i PATH="$PATH" HOME="$HOME" KUBECONFIG="$kubeconfig" SYSTEM_UPGRADE_CONTROLLER_KUBE_CONFIG="$kubeconfig" \
    SYSTEM_UPGRADE_CONTROLLER_NAME=suc-e2e-bootstrap SYSTEM_UPGRADE_CONTROLLER_NAMESPACE=suc-e2e-bootstrap \
    "${extra_env[@]}" "$controller" "${controller_args[@]}" >"$work/bootstrap.log" 2>&1 &
  boot=$!
  for _ in $(seq 1 120); do
    "${kc[@]}" get crd plans.upgrade.cattle.io >/dev/null 2>&1 && break
    sleep 0.5
  done
  established crd/plans.upgrade.cattle.io
  kill "$boot" 2>/dev/null || true
  wait "$boot" 2>/dev/null || true
  "${kc[@]}" delete namespace suc-e2e-bootstrap --wait=false >/dev/null
fi

env_args=()
for kv in "${extra_env[@]}"; do env_args+=(--env "$kv"); done
for arg in "${controller_args[@]}"; do env_args+=(--arg "$arg"); done
python3 "$here/controllers.py" --kubeconfig "$kubeconfig" --controller "$controller" \
  --log-dir "$work/controllers" "${env_args[@]}" 2>"$work/controllers.log" &
shim=$!

log "running $suite (output in $work/suite.log)"
rc=0
(cd "$work" && "$suite" --provider=local --kubeconfig="$kubeconfig" \
  -ginkgo.v -ginkgo.junit-report="$work/junit.xml" "$@") >"$work/suite.log" 2>&1 || rc=$?
grep -E '^(Ran |PASS|FAIL|SUCCESS|\[FAIL\])|^  \[FAIL\]' "$work/suite.log" >&2 || true
# The specs' namespaces, deleted by the framework with their controllers: none may stay.
left=""
for _ in $(seq 1 180); do
  left=$("${kc[@]}" get namespaces -o jsonpath='{range .items[?(@.status.phase=="Terminating")]}{.metadata.name}{" "}{end}')
  [ -n "$left" ] || break
  sleep 1
done
if [ -n "$left" ]; then
  log "namespaces still Terminating three minutes after the suite: $left"
  for ns in $left; do
    "${kc[@]}" get namespace "$ns" -o jsonpath='{.status.conditions}{"\n"}' >&2 || true
    "${kc[@]}" get plans -n "$ns" -o jsonpath='{range .items[*]}{.metadata.name}{": "}{.metadata.finalizers}{"\n"}{end}' >&2 || true
  done
  [ "$rc" != 0 ] || rc=1
fi
if [ "${SLIPWAY_SUC_E2E_CRD:-}" = suc ] && [ "${controller_args[0]:-}" = run ]; then
  ns=suc-crd-pruned
  log "on SUC's CRD: a Plan written with slipway's fields says what was dropped (namespace $ns)"
  "${kc[@]}" create namespace "$ns" >/dev/null
  env -i PATH="$PATH" HOME="$HOME" KUBECONFIG="$kubeconfig" SYSTEM_UPGRADE_CONTROLLER_KUBE_CONFIG="$kubeconfig" \
    SYSTEM_UPGRADE_CONTROLLER_NAME="$ns" SYSTEM_UPGRADE_CONTROLLER_NAMESPACE="$ns" \
    "${extra_env[@]}" "$controller" "${controller_args[@]}" >"$work/$ns.log" 2>&1 &
  pruned_controller=$!
  # Client-side apply keeps what it applied (pruned fields too) in its annotation; strict field
  # validation, kubectl's default, would refuse the unknown fields outright.
  "${kc[@]}" apply --validate=warn -n "$ns" -f - >/dev/null 2>"$work/$ns.apply" <<'EOF'
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: lost
spec:
  concurrency: 1
  version: v1.0.0
  nodeSelector:
    matchLabels:
      slipway.test/none: none
  upgrade:
    image: busybox
  reboot: {}
  failurePolicy:
    action: Stop
EOF
  want="it dropped spec.failurePolicy, spec.reboot from this Plan"
  said=""
  for _ in $(seq 1 60); do
    said=$("${kc[@]}" get plan lost -n "$ns" -o jsonpath='{.status.conditions[?(@.type=="FieldsPruned")].message}' 2>/dev/null || true)
    case "$said" in *"$want"*) break ;; esac
    sleep 1
  done
  case "$said" in
    *"$want"*) log "the Plan says: $said" ;;
    *)
      log "the Plan does not say what SUC's CRD dropped (FieldsPruned: '$said'; want '...$want...')"
      [ "$rc" != 0 ] || rc=1
      ;;
  esac
  grep -q 'unknown field "spec.reboot"' "$work/$ns.apply" || {
    log "kubectl apply did not warn of spec.reboot: $(cat "$work/$ns.apply")"
    [ "$rc" != 0 ] || rc=1
  }
  kill "$pruned_controller" 2>/dev/null || true
  wait "$pruned_controller" 2>/dev/null || true
  "${kc[@]}" delete namespace "$ns" --wait=false >/dev/null
fi
log "exit $rc; logs in $work"
exit "$rc"
