# Shared helpers for tests/nodes/*.sh (real nodes: QEMU guests joined to the local test cluster).
# Source it; it defines variables and functions only.
# shellcheck shell=bash

nodes_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cluster_scripts=$(cd "$nodes_dir/../cluster" && pwd)
# shellcheck source=../cluster/lib.sh
source "$cluster_scripts/lib.sh"
# shellcheck source=../cluster/versions.env
source "$cluster_scripts/versions.env"
# shellcheck source=versions.env
source "$nodes_dir/versions.env"

nodes_log() { echo "nodes: $*" >&2; }
nodes_die() {
  nodes_log "ERROR: $*"
  exit 1
}

cache_root="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}"

# Every guest sees the API server at GUEST_API_ADDRESS (tests/cluster/lib.sh) on the API server's
# own port: a guestfwd rule of QEMU's user-mode network connects it to the host's loopback. That is
# the only address that leads anywhere. The guest's own address and gateway (the same in every
# guest; guests never meet):
# shellcheck disable=SC2034 # used by the scripts that source this file
GUEST_ADDRESS=10.0.2.15
# shellcheck disable=SC2034
GUEST_GATEWAY=10.0.2.2
# Where a guest given a registry mirror (up.sh --registry-mirror) reaches the registry on the host's
# loopback: a second guestfwd rule, as for the API server.
# shellcheck disable=SC2034
GUEST_REGISTRY_ADDRESS=10.0.2.101
# Guests' pod subnets: 10.200.<index>.0/24, index 1..250 per cluster.
# shellcheck disable=SC2034
GUEST_POD_PREFIX=10.200

# Debian packages the host needs for building and running guests.
HOST_PACKAGES=(qemu-system-x86 qemu-utils debootstrap socat busybox-static e2fsprogs gcc libc6-dev python3 openssl)

# ensure_packages : installs the Debian packages of HOST_PACKAGES that are missing (apt-get update
# first), as root or through sudo.
ensure_packages() {
  local missing=() p
  for p in "${HOST_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  command -v apt-get >/dev/null 2>&1 ||
    nodes_die "missing Debian packages (${missing[*]}) and no apt-get to install them"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || nodes_die "missing Debian packages (${missing[*]}); run as root or install sudo"
    sudo=(sudo)
  fi
  nodes_log "installing Debian packages: ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# kubelet_versions : every kubelet stamp built (the installed one first).
kubelet_versions() {
  # shellcheck disable=SC2086 # a list of words
  printf '%s\n' "$NODE_KUBELET_VERSION" $NODE_KUBELET_UPGRADES
}

# Where build.sh keeps the kubelet and kube-proxy builds (by Kubernetes source and stamps).
node_bin_dir() {
  echo "$cache_root/nodes-k8s-$K8S_VERSION/bin"
}

# image_key : the cache key of the guest disk image: the versions and a hash of everything that
# goes into it (the build script, the guest's files, the image writer, the pause program, the
# upgrade program).
image_key() {
  local h files
  mapfile -t files < <(cd "$nodes_dir" && find guest -type f | LC_ALL=C sort)
  h=$(cd "$nodes_dir" && cat build.sh versions.env oci_archive.py pause.c kubelet-upgrade.sh \
    ../cluster/versions.env "${files[@]}" | sha256sum | cut -c1-12)
  echo "nodes-$DEBIAN_SUITE-k8s-$K8S_VERSION-kubelet-$NODE_KUBELET_VERSION-$h"
}

# image_dir : the directory build.sh writes the guest image to (disk.img, vmlinuz, initrd.img).
image_dir() {
  echo "$cache_root/$(image_key)"
}

# accel : "kvm" if a KVM guest really runs here, else "tcg". Nested KVM often exists without
# working (QEMU aborts on "failed to set MSR 0x10a", or the guest hangs), so it is probed once by
# booting the guest kernel for a few seconds, and the answer is cached.
# SLIPWAY_NODES_ACCEL=kvm|tcg skips the probe. KERNEL: the guest kernel to probe with (default:
# the cached image's).
accel() {
  if [ -n "${SLIPWAY_NODES_ACCEL:-}" ]; then
    echo "$SLIPWAY_NODES_ACCEL"
    return
  fi
  local cached="$cache_root/nodes-accel"
  if [ -f "$cached" ]; then
    cat "$cached"
    return
  fi
  local result=tcg kernel=${1:-$(image_dir)/vmlinuz}
  if [ -r /dev/kvm ] && [ -w /dev/kvm ] && [ -f "$kernel" ]; then
    local out
    out=$(timeout 20 qemu-system-x86_64 -enable-kvm -cpu host -m 256 -nodefaults -no-user-config \
      -display none -serial stdio -no-reboot -kernel "$kernel" \
      -append "console=ttyS0 panic=-1 root=/dev/nonexistent" 2>&1 </dev/null || true)
    if grep -q "Kernel panic\|VFS: Unable to mount root" <<<"$out"; then
      result=kvm
    fi
  fi
  mkdir -p "$cache_root"
  echo "$result" >"$cached"
  nodes_log "KVM probe: guests run with $result (cached in $cached)"
  echo "$result"
}

# qemu_base_args ACCEL MEMORY_MIB CPUS : the machine every guest runs on.
qemu_base_args() {
  local accel=$1 mem=$2 cpus=$3
  local args=(-nodefaults -no-user-config -display none -m "$mem" -smp "$cpus")
  if [ "$accel" = kvm ]; then
    args+=(-machine q35 -accel kvm -cpu host)
  else
    # shellcheck disable=SC2054 # one option whose value has commas
    args+=(-machine q35 -accel tcg,thread=multi,tb-size=256 -cpu max)
  fi
  printf '%s\n' "${args[@]}"
}

# The guest kernel's command line (the root disk is the first virtio disk).
GUEST_CMDLINE="console=ttyS0 root=/dev/vda rw quiet loglevel=4 net.ifnames=0 biosdevname=0 \
mitigations=off audit=0 nowatchdog tsc=reliable no_timer_check random.trust_cpu=on \
systemd.show_status=false"

# guest_env CLUSTER_DIR NAME : loads the guest's settings (written by up.sh to guests/NAME/guest.env):
# IMAGE_DIR ACCEL MEMORY CPUS API_PORT KUBELET_PORT.
guest_env() {
  local g="$1/guests/$2"
  [ -f "$g/guest.env" ] || nodes_die "no guest $2 in $1 (start it with tests/nodes/up.sh $1 $2)"
  # shellcheck source=/dev/null
  source "$g/guest.env"
}

# guest_pid CLUSTER_DIR NAME : prints the guest's QEMU pid if it is running.
guest_pid() {
  local f="$1/pids/guest-$2.pid" pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  pid_is_ours "$pid" "$1" || return 1
  echo "$pid"
}

# start_guest CLUSTER_DIR NAME : starts the guest's QEMU from its disk (guests/NAME/disk.qcow2, a
# copy-on-write overlay of the cached image) and config disk, and records its pid in
# CLUSTER_DIR/pids/guest-NAME.pid, so that tests/cluster/down.sh stops it.
# The network: QEMU's user-mode network with restrict=on, so the guest reaches nothing, except
# GUEST_API_ADDRESS:API_PORT, which a guestfwd rule connects to the API server on the host's
# loopback (socat, a process per connection), GUEST_REGISTRY_ADDRESS:REGISTRY_PORT likewise to a
# registry when the guest has one, and the host reaches the kubelet on 127.0.0.1:KUBELET_PORT (a
# hostfwd rule; the API server goes there through egress-proxy.py).
start_guest() {
  local dir=$1 name=$2 g="$1/guests/$2" machine cmdline=$GUEST_CMDLINE registry=''
  guest_env "$dir" "$name"
  if [ -n "${REGISTRY_PORT:-}" ]; then
    registry=",guestfwd=tcp:$GUEST_REGISTRY_ADDRESS:$REGISTRY_PORT-cmd:socat - TCP:127.0.0.1:$REGISTRY_PORT"
  fi
  # SLIPWAY_NODES_VERBOSE=1: the guest's journal (kubelet, containerd) on its console log too.
  if [ "${SLIPWAY_NODES_VERBOSE:-}" = 1 ]; then
    cmdline="$cmdline systemd.journald.forward_to_console=1 systemd.show_status=true"
  fi
  # shellcheck disable=SC2153 # ACCEL, MEMORY and CPUS come from guest_env
  mapfile -t machine < <(qemu_base_args "$ACCEL" "$MEMORY" "$CPUS")
  echo "---- $(date -u +%FT%TZ) QEMU starts ----" >>"$g/console.log"
  qemu-system-x86_64 "${machine[@]}" -name "slipway-node-$name" \
    -kernel "$IMAGE_DIR/vmlinuz" -initrd "$IMAGE_DIR/initrd.img" -append "$cmdline" \
    -drive "file=$g/disk.qcow2,format=qcow2,if=virtio" \
    -drive "file=$g/config.img,format=raw,if=virtio,readonly=on" \
    -netdev "user,id=net0,restrict=on,ipv6=off,guestfwd=tcp:$GUEST_API_ADDRESS:$API_PORT-cmd:socat - TCP:127.0.0.1:$API_PORT$registry,hostfwd=tcp:127.0.0.1:$KUBELET_PORT-:$KUBELET_PORT" \
    -device virtio-net-pci,netdev=net0,romfile= \
    -chardev "file,id=console,path=$g/console.log,append=on" -serial chardev:console \
    </dev/null >>"$g/qemu.log" 2>&1 &
  echo $! >"$dir/pids/guest-$name.pid"
}

# node_state KUBECTL NAME : prints "<bootID> <Ready status> <taint keys...>" of node NAME (nothing
# if it does not exist yet).
node_state() {
  "$1" get node "$2" --ignore-not-found \
    -o jsonpath='{.status.nodeInfo.bootID} {range .status.conditions[?(@.type=="Ready")]}{.status}{end} {.spec.taints[*].key}' 2>/dev/null
}

# set_up_since_start CLUSTER_DIR NAME : whether the guest's setup ran since QEMU last started (its
# console says so).
set_up_since_start() {
  awk '/^---- .* QEMU starts ----$/ { up = 0 } /^slipway-node: node .* set up/ { up = 1 }
    END { exit !up }' "$1/guests/$2/console.log" 2>/dev/null
}

# restart_guest CLUSTER_DIR NAME : kills the guest's QEMU and starts it again from its disk.
restart_guest() {
  local pid
  if pid=$(guest_pid "$1" "$2"); then
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      pid_is_ours "$pid" "$1" || break
      sleep 0.1
    done
  fi
  echo "---- $(date -u +%FT%TZ) killed: no setup in time ----" >>"$1/guests/$2/console.log"
  start_guest "$1" "$2"
}

# wait_guest_ready CLUSTER_DIR NAME TIMEOUT [OLD_BOOT_ID] [LABEL...] : waits until node NAME is
# Ready without the node lifecycle controller's not-ready or unreachable taint (with OLD_BOOT_ID:
# and with another boot ID), applying the LABELs (k=v) with the admin's
# credentials as soon as the Node exists (a kubelet may not set node-role labels itself). Fails
# early, with the console's end, if QEMU exits.
# A boot that has not reached the guest's setup SLIPWAY_NODES_SETUP_TIMEOUT seconds (360) after
# QEMU started is started again, twice at most: under TCG a guest once hung before its root disk
# was written, a host core busy and its console empty, while its twin beside it was set up in 58 s
# (CI, 2026-11-27; a setup took 150 s at most, with four guests booting on two cores).
wait_guest_ready() {
  local dir=$1 name=$2 timeout=$3 old=${4:-} labelled=false state boot ready taints
  shift 4 || shift $#
  local labels=("$@") deadline=$((SECONDS + timeout))
  local setup_timeout=${SLIPWAY_NODES_SETUP_TIMEOUT:-360} qemu_started=$SECONDS restarts=0
  local kubectl
  kubectl="$("$cluster_scripts/build.sh" | tail -n 1)/kubectl"
  while :; do
    if ! guest_pid "$dir" "$name" >/dev/null; then
      tail -n 40 "$dir/guests/$name/console.log" >&2 || true
      nodes_die "the QEMU of $name exited (console: $dir/guests/$name/console.log)"
    fi
    if [ "$restarts" -lt 2 ] && [ $((SECONDS - qemu_started)) -ge "$setup_timeout" ] &&
      ! set_up_since_start "$dir" "$name"; then
      nodes_log "node $name: no setup ${setup_timeout}s after QEMU started (a hung boot); starting it again"
      restart_guest "$dir" "$name"
      restarts=$((restarts + 1)) qemu_started=$SECONDS
      deadline=$((deadline > SECONDS + setup_timeout ? deadline : SECONDS + setup_timeout))
    fi
    state=$(KUBECONFIG="$dir/kubeconfig" node_state "$kubectl" "$name" || true)
    if [ -n "$state" ] && [ "$labelled" = false ]; then
      if [ "${#labels[@]}" -gt 0 ]; then
        KUBECONFIG="$dir/kubeconfig" "$kubectl" label node "$name" --overwrite "${labels[@]}" >/dev/null
      fi
      labelled=true
    fi
    read -r boot ready taints <<<"$state"
    if [ "${ready:-}" = True ] && { [ -z "$old" ] || [ "$boot" != "$old" ]; } &&
      [[ " ${taints:-} " != *" node.kubernetes.io/not-ready "* ]] &&
      [[ " ${taints:-} " != *" node.kubernetes.io/unreachable "* ]]; then
      return 0
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      tail -n 40 "$dir/guests/$name/console.log" >&2 || true
      nodes_die "node $name not Ready after ${timeout}s (state: '${state:-no Node object}'; console: $dir/guests/$name/console.log)"
    fi
    # Until its kubelet registers (minutes into a boot under emulation) a guest is asked every 5 s:
    # each kubectl costs a tenth of a core-second, taken from the guests booting beside it.
    if [ -n "$state" ]; then sleep 1; else sleep 5; fi
  done
}
