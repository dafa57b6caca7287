#!/usr/bin/env bash
# Smoke test of the real test nodes: a local cluster with kwok nodes, two QEMU guests joined to it
# (one control-plane), and what later tests rely on:
#   1. both nodes Ready, reporting the installed kubelet version; the control-plane label and taint
#   2. kwok still runs its own nodes and pods (and leaves the real ones alone)
#   3. a pod on the pod network reaches the API server through the kubernetes Service
#      (10.96.0.1:443) with its ServiceAccount token: `kubectl get nodes` from rancher/kubectl
#   4. the guest reaches the API server's forwarded address and nothing else on the host (from an
#      image imported at boot with up.sh --image)
#   5. a privileged Job on the host's namespaces with / at /host (as SUC's and slipway's upgrade
#      Jobs are) replaces the kubelet; the node then reports the new kubeletVersion
#   6. a real reboot from a privileged pod (nsenter into PID 1, systemctl reboot): a new bootID,
#      Ready again, the new kubelet still there
#   7. tests/cluster/down.sh leaves no QEMU or socat process behind
# It prints each timing, and PASS or FAIL at the end.
#
#   tests/nodes/smoke.sh
#
# Environment: SLIPWAY_NODES_SMOKE_KWOK (kwok nodes, default 2), SLIPWAY_NODES_SMOKE_IDLE (seconds
# to measure an idle guest's CPU and memory after the nodes are up, default 0: skipped),
# SLIPWAY_NODES_SMOKE_KEEP=1 (keep the cluster running at the end; prints how to stop it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

log() { echo "smoke: $*" >&2; }
timings=()
timing() { # timing LABEL VALUE [UNIT] : UNIT defaults to s (seconds)
  local unit=${3:-s}
  timings+=("$(printf '%-66s %6s %s' "$1" "$2" "$unit")")
  log "$1: $2 $unit"
}
fail() {
  log "FAIL: $*"
  exit 1
}

t=$SECONDS
image=$("$here/build.sh" | tail -n 1)
cluster_bin=$("$cluster_scripts/build.sh" | tail -n 1)
kubectl="$cluster_bin/kubectl"
timing "guest image and binaries ready (cached after the first run)" $((SECONDS - t))

dir=$(mktemp -d /tmp/slipway-nodes-smoke.XXXXXX)
ok=false
api_port=""
cleanup() {
  local rc=$?
  if [ "${SLIPWAY_NODES_SMOKE_KEEP:-}" = 1 ] && [ -e "$dir/.slipway-cluster" ]; then
    log "kept the cluster: export KUBECONFIG=$dir/kubeconfig; stop it with $cluster_scripts/down.sh $dir"
  else
    "$cluster_scripts/down.sh" "$dir" >/dev/null 2>&1 || true
  fi
  if [ "$ok" != true ]; then
    log "FAIL (exit $rc)"
    [ "$rc" -eq 0 ] && rc=1
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

t=$SECONDS
kwok_nodes=${SLIPWAY_NODES_SMOKE_KWOK:-2}
SLIPWAY_CLUSTER_DIR="$dir" SLIPWAY_CLUSTER_OWNER_PID=$$ \
  SLIPWAY_CLUSTER_NODE_PREFIX=kwok- "$cluster_scripts/up.sh" "$kwok_nodes" >/dev/null
timing "cluster up with $kwok_nodes kwok nodes" $((SECONDS - t))
export KUBECONFIG="$dir/kubeconfig"
# shellcheck source=/dev/null
source "$dir/ports.env"
api_port=$APISERVER_PORT

# --- 1. two guests, booted side by side -------------------------------------------------------
# worker-1 also imports an image archive at boot (--image, as slipway's own image would be).
python3 "$here/oci_archive.py" --out "$dir/extra.tar" --tag slipway.test/smoke-extra:1 \
  --busybox /bin/busybox --cmd '["sh"]' 2>/dev/null
t=$SECONDS
"$here/up.sh" "$dir" cp-1 --control-plane 2>"$dir/up-cp-1.log" &
cp_pid=$!
"$here/up.sh" "$dir" worker-1 --label slipway.test/pool=workers --image "$dir/extra.tar" \
  2>"$dir/up-worker-1.log" &
worker_pid=$!
wait "$cp_pid" || { cat "$dir/up-cp-1.log" >&2; fail "node cp-1 did not come up"; }
wait "$worker_pid" || { cat "$dir/up-worker-1.log" >&2; fail "node worker-1 did not come up"; }
grep -h "Ready" "$dir/up-cp-1.log" "$dir/up-worker-1.log" >&2
timing "2 guests started side by side, both Ready" $((SECONDS - t))
for f in "$dir/up-cp-1.log" "$dir/up-worker-1.log"; do
  s=$(sed -n 's/.* Ready \([0-9]*\)s after QEMU started.*/\1/p' "$f")
  timing "  $(basename "$f" .log | sed 's/^up-//'): QEMU start to node Ready" "$s"
done

node_field() { "$kubectl" get node "$1" -o jsonpath="$2"; }
for n in cp-1 worker-1; do
  v=$(node_field "$n" '{.status.nodeInfo.kubeletVersion}')
  [ "$v" = "$NODE_KUBELET_VERSION" ] || fail "node $n reports kubelet $v, not $NODE_KUBELET_VERSION"
done
log "both nodes Ready with kubelet $NODE_KUBELET_VERSION"
node_field cp-1 '{.metadata.labels}' | grep -q '"node-role.kubernetes.io/control-plane":""' ||
  fail "cp-1 lacks the control-plane label"
node_field cp-1 '{.spec.taints}' | grep -q '"key":"node-role.kubernetes.io/control-plane"' ||
  fail "cp-1 lacks the control-plane taint"
[ -z "$(node_field worker-1 '{.spec.taints}')" ] || fail "worker-1 has taints: $(node_field worker-1 '{.spec.taints}')"
log "cp-1 has the control-plane label and taint; worker-1 is untainted"

# --- 2. kwok is unchanged for its own nodes ---------------------------------------------------
ns=smoke
"$kubectl" create namespace "$ns" >/dev/null
for _ in $(seq 1 60); do
  "$kubectl" -n "$ns" get serviceaccount default >/dev/null 2>&1 && break
  sleep 0.5
done
job() { # job NAME NODE IMAGE [SPEC-EXTRA-YAML] -- ARGS... : a Job pinned to NODE
  local name=$1 node=$2 image=$3 extra=$4 args
  shift 4
  [ "${1:-}" = -- ] && shift
  args=$(printf '"%s",' "$@")
  "$kubectl" -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: $name}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {kubernetes.io/hostname: $node}
      tolerations: [{operator: Exists}]
$extra
      containers:
      - name: main
        image: $image
        args: [${args%,}]
EOF
}
wait_job() { # wait_job NAME TIMEOUT : until Complete; fails on Failed
  local name=$1 deadline=$((SECONDS + $2)) state
  while :; do
    state=$("$kubectl" -n "$ns" get job "$name" -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type} {end}')
    case "$state" in
    *Complete*) return 0 ;;
    *Failed*)
      "$kubectl" -n "$ns" logs "job/$name" >&2 || true
      fail "Job $name failed"
      ;;
    esac
    [ "$SECONDS" -lt "$deadline" ] || {
      "$kubectl" -n "$ns" describe job "$name" >&2
      fail "Job $name not complete after $2s"
    }
    sleep 1
  done
}
t=$SECONDS
job kwok-job kwok-1 busybox:1.37 "" -- true
wait_job kwok-job 60
[ "$(node_field kwok-1 '{.status.conditions[?(@.type=="Ready")].status}')" = True ] || fail "kwok-1 is not Ready"
timing "a kwok pod completes on a kwok node" $((SECONDS - t))

# --- 3. the kubernetes Service from the pod network, with the ServiceAccount token ------------
"$kubectl" apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: slipway-smoke-nodes}
rules: [{apiGroups: [""], resources: [nodes], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: slipway-smoke-nodes}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: slipway-smoke-nodes}
subjects: [{kind: ServiceAccount, name: default, namespace: $ns}]
EOF
t=$SECONDS
job service worker-1 rancher/kubectl:v1.30.3 "" -- get nodes -o name -v=6
wait_job service 180
out=$("$kubectl" -n "$ns" logs job/service 2>&1)
if ! grep -q "node/cp-1" <<<"$out" || ! grep -q "node/worker-1" <<<"$out"; then
  echo "$out" >&2
  fail "kubectl in a pod did not list the nodes"
fi
grep -q "https://10.96.0.1:443" <<<"$out" || { echo "$out" >&2; fail "kubectl in a pod did not use the kubernetes Service"; }
pod_ip=$("$kubectl" -n "$ns" get pods -l job-name=service -o jsonpath='{.items[0].status.podIP}')
[[ $pod_ip == "$GUEST_POD_PREFIX".* ]] || fail "the pod's IP $pod_ip is not on the pod network"
timing "kubectl in a pod (IP $pod_ip) lists the nodes via 10.96.0.1" $((SECONDS - t))

# --- 4. the network rule ----------------------------------------------------------------------
# From the node's own network namespace: the forwarded API address answers; the host behind the
# user-mode network's gateway (which without restrict=on is the host's loopback, where the API
# server listens) does not.
t=$SECONDS
# (One line: the Job's YAML folds newlines.)
# The image is the one worker-1 imported at boot (--image).
job network worker-1 slipway.test/smoke-extra:1 "      hostNetwork: true" -- sh -c "\
if echo | nc -w 3 $GUEST_API_ADDRESS $api_port; then echo 'api: reachable'; else echo 'api: UNREACHABLE'; exit 1; fi; \
if echo | nc -w 3 $GUEST_GATEWAY $api_port; then echo 'gateway: REACHABLE'; exit 1; else echo 'gateway: unreachable'; fi"
wait_job network 120
"$kubectl" -n "$ns" logs job/network >&2
timing "network: only $GUEST_API_ADDRESS:$api_port answers" $((SECONDS - t))

# --- 5. the kubelet replaced by a privileged Job, as k3s-upgrade replaces k3s ------------------
new_version=$(echo "$NODE_KUBELET_UPGRADES" | cut -d' ' -f1)
t=$SECONDS
# The pod spec of slipway's (and SUC's) upgrade Jobs: the host's namespaces, privileged, / at /host,
# the Plan's version in SYSTEM_UPGRADE_PLAN_LATEST_VERSION (src/plan/core/job/).
"$kubectl" -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: upgrade}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      hostIPC: true
      hostPID: true
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      nodeSelector: {kubernetes.io/hostname: worker-1}
      tolerations: [{key: node.kubernetes.io/unschedulable, operator: Exists, effect: NoSchedule}]
      volumes: [{name: host-root, hostPath: {path: /, type: Directory}}]
      containers:
      - name: upgrade
        image: $UPGRADE_IMAGE:$new_version
        securityContext: {privileged: true}
        env: [{name: SYSTEM_UPGRADE_PLAN_LATEST_VERSION, value: "$new_version"}]
        volumeMounts: [{name: host-root, mountPath: /host}]
EOF
deadline=$((SECONDS + 180))
while [ "$(node_field worker-1 '{.status.nodeInfo.kubeletVersion}')" != "$new_version" ]; do
  [ "$SECONDS" -lt "$deadline" ] || { "$kubectl" -n "$ns" logs job/upgrade >&2 || true; fail "worker-1 does not report kubelet $new_version"; }
  sleep 1
done
timing "upgrade Job: worker-1 reports kubelet $new_version" $((SECONDS - t))
wait_job upgrade 120
"$kubectl" -n "$ns" logs job/upgrade >&2

# --- 6. a real reboot -------------------------------------------------------------------------
old_boot=$(node_field worker-1 '{.status.nodeInfo.bootID}')
t=$SECONDS
"$kubectl" -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: reboot}
spec:
  restartPolicy: Never
  hostPID: true
  nodeSelector: {kubernetes.io/hostname: worker-1}
  tolerations: [{operator: Exists}]
  containers:
  - name: reboot
    image: busybox:1.36
    command: [sh, -c, "sync; sleep 1; nsenter -t 1 -m -u -i -n -p -- systemctl reboot; sleep 600"]
    securityContext: {privileged: true}
EOF
wait_guest_ready "$dir" worker-1 400 "$old_boot"
boot=$(node_field worker-1 '{.status.nodeInfo.bootID}')
timing "reboot: pod created to Ready with a new bootID" $((SECONDS - t))
v=$(node_field worker-1 '{.status.nodeInfo.kubeletVersion}')
[ "$v" = "$new_version" ] || fail "after the reboot worker-1 reports kubelet $v, not $new_version"
log "worker-1 rebooted: boot $old_boot -> $boot, kubelet $v"

# --- optional: an idle guest's CPU and memory ---------------------------------------------------
idle=${SLIPWAY_NODES_SMOKE_IDLE:-0}
if [ "$idle" -gt 0 ]; then
  pid=$(guest_pid "$dir" cp-1)
  hz=$(getconf CLK_TCK)
  ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
  a=$(ticks "$pid")
  sleep "$idle"
  b=$(ticks "$pid")
  cpu=$(awk -v d=$((b - a)) -v hz="$hz" -v s="$idle" 'BEGIN { printf "%.1f", 100 * d / hz / s }')
  rss=$(awk '/^VmRSS/ {printf "%d", $2 / 1024}' "/proc/$pid/status")
  timing "idle cp-1 over ${idle}s: CPU of its QEMU" "$cpu" "% of one core"
  timing "idle cp-1: QEMU resident memory" "$rss" MiB
fi

# --- 7. nothing left behind -------------------------------------------------------------------
qemu_pids=$(cat "$dir"/pids/guest-*.pid)
if [ "${SLIPWAY_NODES_SMOKE_KEEP:-}" != 1 ]; then
  t=$SECONDS
  "$cluster_scripts/down.sh" "$dir" >/dev/null 2>&1 || fail "down.sh failed"
  # down.sh returns once a process no longer has its command line; an exiting QEMU (1 GiB to
  # release) may take a moment more to be gone, and the guestfwd's socat processes end once their
  # QEMU is gone (end of input).
  running() { [ -e "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
  left=""
  for _ in $(seq 1 50); do
    left=$(pgrep -af "socat - TCP:127.0.0.1:$api_port" || true)
    for p in $qemu_pids; do
      if running "$p"; then left="$left QEMU pid $p"; fi
    done
    [ -z "$left" ] && break
    sleep 0.1
  done
  [ -z "$left" ] || fail "processes left 5 s after down.sh: $left"
  timing "down.sh: no QEMU or socat process left" $((SECONDS - t))
fi

ok=true
log "timings:"
printf '  %s\n' "${timings[@]}" >&2
log "PASS"
