#!/usr/bin/env bash
# Starts a local Kubernetes test cluster as plain processes on 127.0.0.1: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and kwok (fake nodes and pod lifecycle), then creates
# NODES fake nodes (default 3) and waits until everything is ready.
#
#   tests/cluster/up.sh [NODES]
#
# Last stdout line: `export KUBECONFIG=<dir>/kubeconfig`; progress goes to stderr.
# The API server audits the requests of two users only (AUDIT_USERS in lib.sh: the ServiceAccounts
# deploy/ creates for slipway's controller and its Jobs) to <dir>/logs/audit.log; tests/e2e/rbac.rs reads it.
# Stop it with `tests/cluster/down.sh <dir>`.
#
# Environment:
#   SLIPWAY_CLUSTER_DIR          use this (new or empty) directory instead of a fresh
#                                `mktemp -d /tmp/slipway-cluster.XXXXXX`
#   SLIPWAY_CLUSTER_NODE_PREFIX  node name prefix (default `node-`: node-1 ... node-N)
#   SLIPWAY_CLUSTER_TIMEOUT      seconds allowed for startup after the binaries exist (default 180)
#   SLIPWAY_CLUSTER_OWNER_PID    tear the cluster down (down.sh) once this process is gone; a
#                                detached reaper watches it. Used by test binaries.
#   SLIPWAY_CLUSTER_KEEP_ON_FAILURE=1  keep the directory (logs) when startup fails
#   SLIPWAY_CLUSTER_KCM_FLAGS    extra kube-controller-manager flags for the cluster's life (a bench
#                                raising the cluster's own floor: "--kube-api-qps=100 ...")
#   SLIPWAY_CLUSTER_AUDIT_MB     size in MB at which the audit log rotates (default 20; a bench at
#                                thousands of nodes needs more to keep every request it counts)
#   SLIPWAY_CLUSTER_SERVICE_ACCOUNTS=0  disable the API server's ServiceAccount admission plugin
#                                (on, as in every real cluster: pods get their ServiceAccount's
#                                token mounted, which real nodes' Jobs use, and a pod whose
#                                ServiceAccount does not exist is refused)
#   SLIPWAY_CACHE_DIR            where build.sh caches the binaries
#
# Real nodes: the cluster is always ready for QEMU guests to join (tests/nodes/up.sh): the API
# server authorizes with Node,RBAC and admits with NodeRestriction, advertises GUEST_API_ADDRESS
# (lib.sh), and reaches kubelets only through egress-proxy.py. kwok manages only the nodes
# annotated kwok.x-k8s.io/node=fake (the nodes below and tests/e2e/support's fake_node()).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

nodes=${1:-3}
if ! [[ $nodes =~ ^[0-9]+$ ]]; then
  cluster_log "usage: $0 [NODES]   (NODES must be a number, got '$nodes')"
  exit 2
fi
prefix=${SLIPWAY_CLUSTER_NODE_PREFIX:-node-}
timeout=${SLIPWAY_CLUSTER_TIMEOUT:-180}
owner=${SLIPWAY_CLUSTER_OWNER_PID:-}
if [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null; then
  cluster_log "SLIPWAY_CLUSTER_OWNER_PID=$owner is not a running process"
  exit 2
fi

require_tools openssl python3 curl kubectl setsid nohup base64
kubectl=$(command -v kubectl)

bin_dir=$("$here/build.sh" | tail -n 1)
for b in "${CLUSTER_COMPONENTS[@]}"; do
  [ "$b" = egress-proxy ] && continue # a script of this directory
  if [ ! -x "$bin_dir/$b" ]; then
    cluster_log "build.sh did not produce $bin_dir/$b"
    exit 1
  fi
done

if [ -n "${SLIPWAY_CLUSTER_DIR:-}" ]; then
  mkdir -p "$SLIPWAY_CLUSTER_DIR"
  if [ -n "$(ls -A "$SLIPWAY_CLUSTER_DIR")" ]; then
    cluster_log "SLIPWAY_CLUSTER_DIR=$SLIPWAY_CLUSTER_DIR is not empty"
    exit 2
  fi
  dir=$(cd "$SLIPWAY_CLUSTER_DIR" && pwd)
else
  dir=$(mktemp -d /tmp/slipway-cluster.XXXXXX)
fi
touch "$dir/.slipway-cluster" # down.sh only deletes directories carrying this marker
mkdir -p "$dir/pids" "$dir/logs"
kubeconfig="$dir/kubeconfig"
export KUBECONFIG="$kubeconfig" # for the kubectl calls below only

ok=false
failing="" # component whose log is shown on failure
on_exit() {
  local rc=$?
  if [ "$ok" = true ]; then return; fi
  if [ -n "$failing" ] && [ -f "$dir/logs/$failing.log" ]; then
    cluster_log "---- last 30 lines of $dir/logs/$failing.log ----"
    tail -n 30 "$dir/logs/$failing.log" >&2 || true
    cluster_log "---- end of $failing.log ----"
  fi
  cluster_log "startup failed (exit $rc); tearing down"
  if [ "${SLIPWAY_CLUSTER_KEEP_ON_FAILURE:-}" = 1 ]; then
    SLIPWAY_CLUSTER_KEEP=1 bash "$here/down.sh" "$dir" || true
    cluster_log "kept $dir (SLIPWAY_CLUSTER_KEEP_ON_FAILURE=1)"
  else
    bash "$here/down.sh" "$dir" || true
  fi
  [ "$rc" -eq 0 ] && rc=1
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

die() {
  cluster_log "ERROR: $*"
  exit 1
}

start_time=$SECONDS
deadline=$((SECONDS + timeout))

# The reaper starts first, so a cluster whose owner dies during startup is also removed.
if [ -n "$owner" ]; then
  # shellcheck disable=SC2016 # expanded by the reaper's bash
  setsid nohup bash -c '
    echo $$ >"$2/reaper.pid"
    while kill -0 "$1" 2>/dev/null; do sleep 1; done
    echo "owner $1 is gone; tearing down $2" >&2
    exec bash "$3" "$2"' slipway-reaper "$owner" "$dir" "$here/down.sh" \
    >"$dir/logs/reaper.log" 2>&1 </dev/null &
fi

# start NAME CMD... : background process, output to logs/NAME.log, PID to pids/NAME.pid.
start() {
  local name=$1
  shift
  if [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null; then
    die "owner process $owner is gone; not starting $name"
  fi
  "$@" >>"$dir/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$dir/pids/$name.pid"
}

# started_here PID : PID is a child of this script (until a forked shell has exec'd its component,
# its command line does not name $dir yet; on a busy machine that window failed startups).
started_here() {
  local info
  info=$(ps -o ppid=,stat= -p "$1" 2>/dev/null) || return 1
  read -r ppid stat <<<"$info"
  [ "$ppid" = "$$" ] && [ "${stat#Z}" = "$stat" ]
}

# check_alive : every started component is still running.
check_alive() {
  local f name pid
  if [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null; then
    die "owner process $owner is gone (its reaper removes the cluster)"
  fi
  [ -d "$dir/pids" ] || die "$dir/pids disappeared (was down.sh run?)"
  for f in "$dir"/pids/*.pid; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .pid)
    pid=$(cat "$f")
    if ! pid_is_ours "$pid" "$dir" && ! started_here "$pid"; then
      failing=$name
      die "$name exited during startup"
    fi
  done
}

# wait_for COMPONENT DESCRIPTION CMD... : polls CMD until it succeeds or the startup deadline.
wait_for() {
  local component=$1 what=$2 out
  shift 2
  while ! out=$("$@" 2>&1); do
    check_alive
    if [ "$SECONDS" -ge "$deadline" ]; then
      failing=$component
      cluster_log "last check ($*) said: $(tail -c 2000 <<<"$out")"
      die "timed out after ${timeout}s waiting for $what (SLIPWAY_CLUSTER_TIMEOUT)"
    fi
    sleep "$poll"
  done
}
# Between checks: each check of a big cluster lists every node, which costs the API server more
# than the wait saves.
poll=0.2
[ "$nodes" -gt 200 ] && poll=3

cluster_log "starting in $dir (binaries: $bin_dir)"
mapfile -t ports < <(free_ports 5)
[ "${#ports[@]}" -eq 5 ] || die "could not find free ports with python3"
etcd_port=${ports[0]} etcd_peer_port=${ports[1]} api_port=${ports[2]} kcm_port=${ports[3]} sched_port=${ports[4]}
cat >"$dir/ports.env" <<EOF
ETCD_PORT=$etcd_port
ETCD_PEER_PORT=$etcd_peer_port
APISERVER_PORT=$api_port
KUBE_CONTROLLER_MANAGER_PORT=$kcm_port
KUBE_SCHEDULER_PORT=$sched_port
EOF

pki="$dir/pki"
gen_pki "$pki" || die "certificate generation with openssl failed"
write_kubeconfig "$kubeconfig" "https://127.0.0.1:$api_port" "$pki"
write_audit_policy "$dir/audit-policy.yaml"

start etcd "$bin_dir/etcd" \
  --name=slipway --data-dir="$dir/etcd" \
  --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
  --listen-peer-urls="http://127.0.0.1:$etcd_peer_port" \
  --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster="slipway=http://127.0.0.1:$etcd_peer_port" \
  --unsafe-no-fsync=true --log-level=warn
wait_for etcd "etcd /health" curl -fsS "http://127.0.0.1:$etcd_port/health"

# The API server's "cluster" traffic (to kubelets: logs, exec, port-forward) goes through
# egress-proxy.py, which reaches only the guests' forwarded kubelet ports on the loopback.
egress_socket="$dir/egress.sock"
if [ "${#egress_socket}" -gt 100 ]; then # a Unix socket path has at most 107 bytes
  egress_socket=$(mktemp -u /tmp/slipway-egress.XXXXXX)
  ln -s "$egress_socket" "$dir/egress.sock"
fi
cat >"$dir/egress-selector.yaml" <<EOF
apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: $egress_socket
EOF
start egress-proxy python3 "$here/egress-proxy.py" --socket "$egress_socket" --guests "$dir/guests"
wait_for egress-proxy "the egress proxy's socket" test -S "$egress_socket"

# shellcheck disable=SC2054 # one flag whose value is a comma-separated list
admission=(--enable-admission-plugins=NodeRestriction,ServiceAccount)
if [ "${SLIPWAY_CLUSTER_SERVICE_ACCOUNTS:-}" = 0 ]; then
  admission=(--enable-admission-plugins=NodeRestriction --disable-admission-plugins=ServiceAccount)
fi
start kube-apiserver "$bin_dir/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$etcd_port" \
  --bind-address=127.0.0.1 --secure-port="$api_port" \
  --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
  --client-ca-file="$pki/ca.crt" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
  --service-cluster-ip-range=10.96.0.0/16 \
  --authorization-mode=Node,RBAC \
  --allow-privileged=true \
  "${admission[@]}" \
  --advertise-address="$GUEST_API_ADDRESS" \
  --egress-selector-config-file="$dir/egress-selector.yaml" \
  --kubelet-client-certificate="$pki/admin.crt" --kubelet-client-key="$pki/admin.key" \
  --audit-policy-file="$dir/audit-policy.yaml" \
  --audit-log-path="$dir/logs/audit.log" --audit-log-maxsize="${SLIPWAY_CLUSTER_AUDIT_MB:-20}" --audit-log-maxbackup=1 \
  --cert-dir="$dir/apiserver-certs"
wait_for kube-apiserver "kube-apiserver /readyz" \
  curl -fsS --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
  "https://127.0.0.1:$api_port/readyz"

# start_kcm [FLAGS...] : the controller-manager, with Kubernetes' defaults (client QPS 20) unless
# SLIPWAY_CLUSTER_KCM_FLAGS or FLAGS say otherwise.
start_kcm() {
  # shellcheck disable=SC2086 # the extra flags are words
  start kube-controller-manager "$bin_dir/kube-controller-manager" \
    --kubeconfig="$kubeconfig" \
    --authentication-kubeconfig="$kubeconfig" --authorization-kubeconfig="$kubeconfig" \
    --leader-elect=false --controllers='*' \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --bind-address=127.0.0.1 --secure-port="$kcm_port" --cert-dir="$dir/kcm-certs" \
    ${SLIPWAY_CLUSTER_KCM_FLAGS:-} "$@"
}
# A big cluster starts with a controller-manager that may talk fast: at 20 requests per second its
# node lifecycle controller takes minutes to lift the not-ready taint of thousands of new nodes.
# Once they are ready it is started again as configured, so what runs on the cluster measures
# against Kubernetes' defaults.
boost=false
[ "$nodes" -gt 200 ] && boost=true
if [ "$boost" = true ]; then
  start_kcm --kube-api-qps=1000 --kube-api-burst=2000
else
  start_kcm
fi
start kube-scheduler "$bin_dir/kube-scheduler" \
  --kubeconfig="$kubeconfig" \
  --authentication-kubeconfig="$kubeconfig" --authorization-kubeconfig="$kubeconfig" \
  --leader-elect=false \
  --bind-address=127.0.0.1 --secure-port="$sched_port" --cert-dir="$dir/scheduler-certs"
# KWOK_WORKDIR keeps kwok from reading the user's ~/.kwok/kwok.yaml.
start kwok env KWOK_WORKDIR="$dir/kwok" "$bin_dir/kwok" \
  --kubeconfig="$kubeconfig" \
  --config="$here/kwok-stages.yaml" \
  --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --cidr=10.244.0.1/16 --node-ip=10.244.0.1 \
  --node-lease-duration-seconds=40

wait_for kube-controller-manager "kube-controller-manager /healthz" \
  curl -fsSk "https://127.0.0.1:$kcm_port/healthz"
wait_for kube-scheduler "kube-scheduler /healthz" \
  curl -fsSk "https://127.0.0.1:$sched_port/healthz"
wait_for kube-controller-manager "the default ServiceAccount in namespace default" \
  "$kubectl" get serviceaccount default --namespace default

if [ "$nodes" -gt 0 ]; then
  # Batches of 500 nodes, created by 4 kubectl processes at once: one kubectl creates its objects
  # one request after the other, which took 7 minutes for 5,000 nodes.
  mkdir -p "$dir/nodes"
  for i in $(seq 1 "$nodes"); do
    cp=false
    [ "$i" -eq 1 ] && cp=true
    printf -- '---\n%s\n' "$(node_manifest "$prefix$i" "$cp")" >>"$dir/nodes/batch-$(((i - 1) / 500)).yaml"
  done
  failing=kube-apiserver
  # shellcheck disable=SC2016 # expanded by the inner shell
  find "$dir/nodes" -name 'batch-*.yaml' -print0 |
    xargs -0 -P 4 -I{} sh -c '"$1" create -f "$2" >/dev/null' _ "$kubectl" {} ||
    die "creating the nodes failed"
  failing=""
  cluster_log "$nodes nodes created after $((SECONDS - start_time))s"

  # ready_nodes : every node NAME is Ready=True and carries no taint (the not-ready taint added at
  # creation is removed by the node lifecycle controller once kwok reports Ready).
  ready_nodes() {
    local out
    # shellcheck disable=SC2016 # go-template, not shell
    out=$("$kubectl" get nodes -o go-template='{{range .items}}{{.metadata.name}} {{range .status.conditions}}{{if eq .type "Ready"}}{{.status}}{{end}}{{end}} {{if .spec.taints}}tainted{{else}}0{{end}}{{"\n"}}{{end}}') || return 1
    # One pass over the list (a grep per node is quadratic: minutes at 5,000 nodes).
    local ready
    ready=$(awk -v p="$prefix" -v n="$nodes" '
      $2 == "True" && $3 == "0" && index($1, p) == 1 {
        s = substr($1, length(p) + 1)
        # s + 0: mawk compares a substr() result as a string, and "31" <= "300" is false.
        if (s ~ /^[0-9]+$/ && s + 0 >= 1 && s + 0 <= n) c++
      }
      END { print c + 0 }' <<<"$out")
    if [ "$ready" -ne "$nodes" ]; then
      echo "$ready of $nodes nodes Ready without taints; nodes (name, Ready, taints):"$'\n'"$(head -n 20 <<<"$out")"
      return 1
    fi
  }
  wait_for kwok "$nodes nodes to be Ready without taints" ready_nodes
  cluster_log "$nodes nodes ready after $((SECONDS - start_time))s"
fi

if [ "$boost" = true ]; then
  kcm_pid=$(cat "$dir/pids/kube-controller-manager.pid")
  kill "$kcm_pid"
  wait "$kcm_pid" 2>/dev/null || true
  start_kcm
  wait_for kube-controller-manager "kube-controller-manager /healthz (restarted with its defaults)" \
    curl -fsSk "https://127.0.0.1:$kcm_port/healthz"
fi

ok=true
cluster_log "ready in $((SECONDS - start_time))s: $nodes node(s), API server https://127.0.0.1:$api_port, logs in $dir/logs"
cluster_log "stop it with: $here/down.sh $dir"
echo "export KUBECONFIG=$kubeconfig"
