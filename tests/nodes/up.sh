#!/usr/bin/env bash
# Starts a real node of a running local test cluster: a QEMU guest (Debian, systemd, containerd,
# kubelet, kube-proxy) booted from a copy-on-write overlay of the cached guest image, joined as
# node NAME, and by default waits until the node is Ready (and the node lifecycle controller has
# lifted its not-ready taint).
#
#   tests/nodes/up.sh CLUSTER_DIR NAME [--control-plane] [--label KEY=VALUE]... [--image ARCHIVE]...
#                     [--registry-mirror REGISTRY=PORT]... [--memory MIB] [--cpus N] [--no-wait]
#
#   CLUSTER_DIR      a cluster started by tests/cluster/up.sh (its kubeconfig is CLUSTER_DIR/kubeconfig)
#   NAME             the node's name (a DNS label), also its hostname
#   --control-plane  label node-role.kubernetes.io/control-plane="" and taint
#                    node-role.kubernetes.io/control-plane:NoSchedule, as kubeadm and kind do
#   --label K=V      a node label (applied with the admin's credentials once the Node exists, so
#                    node-role.kubernetes.io/* labels work too)
#   --image ARCHIVE  an OCI or Docker image archive imported into the guest's containerd before
#                    its kubelet starts, at every boot
#   --registry-mirror REGISTRY=PORT
#                    the guest's containerd pulls REGISTRY's images (e.g. ghcr.io) from the plain-HTTP
#                    registry on the host's loopback port PORT (tests/tools/registry/up.sh), which
#                    the guest reaches at GUEST_REGISTRY_ADDRESS: a hosts.toml under
#                    /etc/containerd/certs.d, as for any containerd mirror; one PORT per guest
#   --memory MIB     guest memory (default 1024); --cpus N: virtual CPUs (default 2 with KVM, 1
#                    under emulation)
#   --no-wait        return once QEMU runs
#
# The guest's files are in CLUSTER_DIR/guests/NAME (console.log is its serial console), its QEMU
# pid in CLUSTER_DIR/pids/guest-NAME.pid: tests/cluster/down.sh stops it with the cluster.
# tests/nodes/kill.sh and start.sh kill it hard and start it again from the same disk.
# Environment: SLIPWAY_NODES_TIMEOUT (seconds to wait for Ready, default 600),
# SLIPWAY_NODES_VERBOSE=1 (the guest's journal on its console log), SLIPWAY_NODES_ACCEL.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

usage() {
  nodes_log "usage: $0 CLUSTER_DIR NAME [--control-plane] [--label K=V]... [--image ARCHIVE]... [--registry-mirror REGISTRY=PORT]... [--memory MIB] [--cpus N] [--no-wait]"
  exit 2
}
[ $# -ge 2 ] || usage
dir=$1 name=$2
shift 2
control_plane=false wait=true memory=1024 cpus='' labels=() images=() mirrors=() registry_port=''
while [ $# -gt 0 ]; do
  case "$1" in
  --control-plane) control_plane=true ;;
  --label)
    if [ $# -lt 2 ] || [[ $2 != *=* ]]; then usage; fi
    labels+=("$2")
    shift
    ;;
  --image)
    if [ $# -lt 2 ] || [ ! -f "$2" ]; then nodes_die "--image wants an existing archive, got '${2:-}'"; fi
    images+=("$(cd "$(dirname "$2")" && pwd)/$(basename "$2")")
    shift
    ;;
  --registry-mirror)
    [[ ${2:-} =~ ^[a-z0-9.-]+(:[0-9]+)?=[0-9]+$ ]] || usage
    [ -z "$registry_port" ] || [ "$registry_port" = "${2##*=}" ] || nodes_die "one registry port per guest"
    mirrors+=("${2%=*}")
    registry_port=${2##*=}
    shift
    ;;
  --memory)
    [[ ${2:-} =~ ^[0-9]+$ ]] || usage
    memory=$2
    shift
    ;;
  --cpus)
    [[ ${2:-} =~ ^[0-9]+$ ]] || usage
    cpus=$2
    shift
    ;;
  --no-wait) wait=false ;;
  *) usage ;;
  esac
  shift
done
[[ $name =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]] || nodes_die "'$name' is not a DNS label"
[ -e "$dir/.slipway-cluster" ] || nodes_die "$dir is not a cluster directory of tests/cluster/up.sh"
dir=$(cd "$dir" && pwd)
[ -f "$dir/ports.env" ] || nodes_die "$dir/ports.env is missing"
# shellcheck source=/dev/null
source "$dir/ports.env"
g="$dir/guests/$name"
[ ! -e "$g" ] || nodes_die "$g exists: node $name was started before (tests/nodes/start.sh starts it again)"

start_time=$SECONDS
image=$("$here/build.sh" | tail -n 1)
accel=$(accel "$image/vmlinuz")
# Under emulation one virtual CPU: with two, a guest rebooted on an idle host once hung in its
# kernel for good (an RCU stall on CPU 0, "timer wakeup didn't happen" on CPU 1, 2026-11-27), and
# two guests of two vCPUs each are four threads on CI's two cores.
if [ -z "$cpus" ]; then
  cpus=1
  [ "$accel" = kvm ] && cpus=2
fi

# An index per guest of this cluster: its pod subnet is GUEST_POD_PREFIX.<index>.0/24.
mkdir -p "$dir/guests"
exec 9>"$dir/guests/.lock"
flock 9
index=$(($(cat "$dir/guests/.last-index" 2>/dev/null || echo 0) + 1))
[ "$index" -le 250 ] || nodes_die "too many guests in $dir"
echo "$index" >"$dir/guests/.last-index"
mkdir "$g"
flock -u 9
exec 9>&-
pod_subnet="$GUEST_POD_PREFIX.$index.0/24"
kubelet_port=$(lasting_free_port)
api="https://$GUEST_API_ADDRESS:$APISERVER_PORT"

# --- the config disk: certificates, kubeconfigs, configurations, images -----------------------
cfg="$g/config"
root="$cfg/root"
mkdir -p "$root/etc/kubernetes/pki" "$root/etc/cni/net.d" "$cfg/images"
pki="$dir/pki"
client_cert() { # client_cert NAME SUBJECT
  openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$g/$1.key" -out "$g/$1.csr" 2>/dev/null
  openssl x509 -req -in "$g/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -CAserial "$g/ca.srl" -days 3650 -out "$g/$1.crt" \
    -extfile <(printf '%s\n' 'basicConstraints=critical,CA:FALSE' \
      'keyUsage=critical,digitalSignature,keyEncipherment' 'extendedKeyUsage=clientAuth') 2>/dev/null
  rm -f "$g/$1.csr"
}
client_cert kubelet "/CN=system:node:$name/O=system:nodes"
client_cert kube-proxy "/CN=system:kube-proxy"
cp "$pki/ca.crt" "$root/etc/kubernetes/pki/ca.crt"
kubeconfig() { # kubeconfig USER
  cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: slipway-test
  cluster:
    server: $api
    certificate-authority: /etc/kubernetes/pki/ca.crt
users:
- name: $1
  user:
    client-certificate-data: $(base64 -w0 <"$g/$1.crt")
    client-key-data: $(base64 -w0 <"$g/$1.key")
contexts:
- name: slipway-test
  context: {cluster: slipway-test, user: $1}
current-context: slipway-test
EOF
}
kubeconfig kubelet >"$root/etc/kubernetes/kubelet.kubeconfig"
kubeconfig kube-proxy >"$root/etc/kubernetes/kube-proxy.kubeconfig"
chmod 600 "$root/etc/kubernetes/"*.kubeconfig

taints="registerWithTaints: []"
if [ "$control_plane" = true ]; then
  labels=("node-role.kubernetes.io/control-plane=" "${labels[@]}")
  taints=$'registerWithTaints:\n- key: node-role.kubernetes.io/control-plane\n  effect: NoSchedule'
fi
# The kubelet: containerd through CRI with the systemd cgroup driver; its serving certificate is
# self-signed; swap is not checked; images are never garbage-collected (nothing can be pulled
# again) and only an almost full disk or memory evicts pods. Node status timings are Kubernetes'
# defaults (status every 10 s, lease renewed every 10 s).
cat >"$root/etc/kubernetes/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: systemd
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
failSwapOn: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
$taints
EOF
cat >"$root/etc/kubernetes/kubelet.env" <<EOF
KUBELET_ARGS=--hostname-override=$name --node-ip=$GUEST_ADDRESS
EOF
cat >"$root/etc/kubernetes/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: /etc/kubernetes/kube-proxy.kubeconfig}
hostnameOverride: $name
clusterCIDR: $pod_subnet
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0}
EOF
# Pods: a bridge with this node's own subnet; traffic leaving the node is masqueraded to the
# node's address (the API server through the kubernetes Service is the only place it can go).
cat >"$root/etc/cni/net.d/10-slipway.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "slipway",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_subnet"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
# Mirrors: containerd's hosts.toml, one directory per registry (config_path in containerd.toml).
for mirror in "${mirrors[@]}"; do
  mkdir -p "$root/etc/containerd/certs.d/$mirror"
  cat >"$root/etc/containerd/certs.d/$mirror/hosts.toml" <<EOF
server = "https://$mirror"
[host."http://$GUEST_REGISTRY_ADDRESS:$registry_port"]
  capabilities = ["pull", "resolve"]
EOF
done
cat >"$cfg/node.env" <<EOF
NODE_NAME=$name
NODE_ADDRESS=$GUEST_ADDRESS
NODE_GATEWAY=$GUEST_GATEWAY
EOF
for i in "${!images[@]}"; do
  cp "${images[$i]}" "$cfg/images/$i-$(basename "${images[$i]}" .tar).tar"
done
size_kb=$(($(du -sk "$cfg" | cut -f1) + 16384))
truncate -s "${size_kb}k" "$g/config.img"
mke2fs -q -t ext4 -L slipway-cfg -d "$cfg" "$g/config.img"
rm -f "$g"/*.key "$g"/ca.srl

# --- the disk and the machine -----------------------------------------------------------------
qemu-img create -q -f qcow2 -F raw -b "$image/disk.img" "$g/disk.qcow2"
cat >"$g/guest.env" <<EOF
IMAGE_DIR=$image
ACCEL=$accel
MEMORY=$memory
CPUS=$cpus
API_PORT=$APISERVER_PORT
KUBELET_PORT=$kubelet_port
REGISTRY_PORT=$registry_port
EOF
echo "$kubelet_port" >"$g/kubelet-port"
start_guest "$dir" "$name"
nodes_log "started $name (QEMU pid $(cat "$dir/pids/guest-$name.pid"), $accel, ${memory} MiB, $cpus CPUs, pods $pod_subnet, kubelet on 127.0.0.1:$kubelet_port; console $g/console.log)"
boot_start=$SECONDS

if [ "$wait" = true ]; then
  wait_guest_ready "$dir" "$name" "${SLIPWAY_NODES_TIMEOUT:-600}" "" "${labels[@]}"
  nodes_log "node $name Ready $((SECONDS - boot_start))s after QEMU started ($((SECONDS - start_time))s in all)"
elif [ "${#labels[@]}" -gt 0 ]; then
  # The labels still go on as soon as the Node registers: a background wait (stopped by down.sh).
  (wait_guest_ready "$dir" "$name" "${SLIPWAY_NODES_TIMEOUT:-600}" "" "${labels[@]}" || true) \
    >>"$g/labels.log" 2>&1 </dev/null &
  echo $! >"$dir/pids/labels-$name.pid"
fi
