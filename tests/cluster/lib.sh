# Shared helpers for tests/cluster/{up,down}.sh. Source it; it defines functions only.
# shellcheck shell=bash

# The order components are started in; down.sh stops them in reverse.
CLUSTER_COMPONENTS=(etcd egress-proxy kube-apiserver kube-controller-manager kube-scheduler kwok)

# The address QEMU guests (tests/nodes) reach the API server at: QEMU forwards it to the host's
# loopback. The API server advertises it (the `kubernetes` Service's endpoint) and its serving
# certificate names it; the host itself never sends anything to it.
GUEST_API_ADDRESS=10.0.2.100

cluster_log() { echo "cluster: $*" >&2; }

# require_tools TOOL... : exits with a clear message naming every missing tool.
require_tools() {
  local missing=() t
  for t in "$@"; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    cluster_log "missing required tools: ${missing[*]}"
    cluster_log "(Debian packages: openssl, python3, curl, util-linux (setsid), coreutils; kubectl from the Kubernetes/Google Cloud apt repository)"
    exit 1
  fi
}

# free_ports N : prints N distinct free TCP ports on 127.0.0.1, one per line. All sockets are held
# open until every port is chosen, so the N ports differ from each other.
free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
for s in socks:
    print(s.getsockname()[1])
EOF
}

# lasting_free_port : prints a free TCP port on 127.0.0.1 below the kernel's ephemeral range, for a
# listener that goes away and binds the same port again (a guest's kubelet forward, bound by its
# QEMU at each start): a port of the ephemeral range may be taken meanwhile by any outgoing
# connection on loopback (in CI a restarted guest's QEMU was refused its port twice). 20000-29999:
# clear of Kubernetes' own ports (102xx) and the NodePort range in the guest too.
lasting_free_port() {
  python3 - <<'EOF'
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
candidates = list(range(20000, min(low, 30000)))
random.shuffle(candidates)
for port in candidates[:2000]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
else:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
EOF
}

# uuid : prints a random UUID.
uuid() {
  cat /proc/sys/kernel/random/uuid
}

# gen_pki DIR : CA, apiserver serving cert, admin client cert (O=system:masters), SA key pair.
gen_pki() {
  local p=$1
  mkdir -p "$p"
  (
    cd "$p"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=slipway-test-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
      -keyout ca.key -out ca.crt
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key -out apiserver.csr
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -out apiserver.crt \
      -extfile <(printf '%s\n' \
        'basicConstraints=critical,CA:FALSE' \
        'keyUsage=critical,digitalSignature,keyEncipherment' \
        'extendedKeyUsage=serverAuth' \
        "subjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1,IP:$GUEST_API_ADDRESS")
    openssl req -newkey rsa:2048 -nodes -subj "/CN=slipway-admin/O=system:masters" -keyout admin.key -out admin.csr
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -out admin.crt \
      -extfile <(printf '%s\n' \
        'basicConstraints=critical,CA:FALSE' \
        'keyUsage=critical,digitalSignature,keyEncipherment' \
        'extendedKeyUsage=clientAuth')
    openssl genrsa -out sa.key 2048
    openssl rsa -in sa.key -pubout -out sa.pub
    rm -f ./*.csr ca.srl
  ) >/dev/null 2>&1
}

# write_kubeconfig FILE SERVER_URL PKI_DIR : admin kubeconfig with the certificates embedded.
write_kubeconfig() {
  local file=$1 server=$2 p=$3
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: slipway-test
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 <"$p/ca.crt")
users:
- name: slipway-admin
  user:
    client-certificate-data: $(base64 -w0 <"$p/admin.crt")
    client-key-data: $(base64 -w0 <"$p/admin.key")
contexts:
- name: slipway-test
  context:
    cluster: slipway-test
    user: slipway-admin
current-context: slipway-test
EOF
  chmod 600 "$file"
}

# AUDIT_USERS: the users whose requests the API server's audit log records (at level Metadata:
# who, verb, resource, response code; no bodies): slipway's two ServiceAccounts as deploy/ installs
# them, the controller's and the upgrade Jobs'. tests/e2e/rbac.rs reads the log to prove that
# deploy/'s RBAC grants exactly what slipway uses, each account apart. Nobody else is logged, so the
# log stays small even when every test shares the cluster.
AUDIT_USERS='"system:serviceaccount:system-upgrade:system-upgrade-controller", "system:serviceaccount:system-upgrade:system-upgrade"'

# write_audit_policy FILE : the audit policy for AUDIT_USERS. RequestReceived is omitted; watches
# keep ResponseStarted (a watch still open at the end has no ResponseComplete yet).
write_audit_policy() {
  cat >"$1" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [$AUDIT_USERS]
- level: None
EOF
}

# node_manifest NAME CONTROL_PLANE(true|false) : a kwok-managed Node with its status set on
# create (the API server keeps status on Node create). tests/e2e/support/mod.rs builds the same node.
node_manifest() {
  local name=$1 cp=$2 cp_label=""
  if [ "$cp" = true ]; then
    cp_label='    node-role.kubernetes.io/control-plane: ""'
  fi
  cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $name
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: $name
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
$cp_label
spec: {}
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
  nodeInfo:
    architecture: amd64
    bootID: $(uuid)
    machineID: $(uuid | tr -d -)
    systemUUID: $(uuid)
    containerRuntimeVersion: containerd://1.7.0-kwok
    kernelVersion: 6.1.0-kwok
    kubeProxyVersion: v1.34.4
    kubeletVersion: v1.34.4
    operatingSystem: linux
    osImage: Debian GNU/Linux 12 (kwok)
EOF
}

# pid_is_ours PID DIR : true if PID is alive and its command line mentions DIR (every component
# is started with paths inside the cluster directory), which guards against PID reuse.
pid_is_ours() {
  local pid=$1 dir=$2
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qF -- "$dir"
}

# stop_pid PID NAME DIR : SIGTERM, then SIGKILL after a grace period; waits until it is gone.
stop_pid() {
  local pid=$1 name=$2 dir=$3 i
  pid_is_ours "$pid" "$dir" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 1 50); do # 5 s
    pid_is_ours "$pid" "$dir" || return 0
    sleep 0.1
  done
  cluster_log "$name (pid $pid) ignored SIGTERM for 5s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do
    pid_is_ours "$pid" "$dir" || return 0
    sleep 0.1
  done
  cluster_log "$name (pid $pid) is still alive after SIGKILL"
  return 1
}
