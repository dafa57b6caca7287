#!/usr/bin/env bash
# Builds what real test nodes need, once, into a cache outside the repository, and prints the
# directory of the guest image (disk.img, vmlinuz, initrd.img, images/) last.
#
#   tests/nodes/build.sh
#
# 1. The Debian packages the host needs (qemu-system-x86, qemu-utils, debootstrap, socat,
#    busybox-static, ...), with apt-get.
# 2. The local cluster's binaries (tests/cluster/build.sh: kubectl among them).
# 3. kubelet and kube-proxy from the cluster's Kubernetes module (tests/cluster/go/kubernetes),
#    the kubelet once per version stamp of versions.env (NODE_KUBELET_VERSION installed in the
#    image, NODE_KUBELET_UPGRADES in the upgrade image), into <cache>/nodes-k8s-<version>/bin.
# 4. The container images every node has, as OCI archives (oci_archive.py; nothing is pulled):
#      slipway.test/pause:1                  the sandbox image (pause.c, static)
#      busybox:1.37, busybox:1.36            busybox-static (1.36 is slipway's reboot image)
#      rancher/kubectl:v1.30.3               the cluster's static kubectl plus busybox (slipway's
#                                            default drain/cordon image); entrypoint kubectl
#      slipway.test/kubelet-upgrade:<v>      every kubelet build, kubelet-upgrade.sh and kubectl, one tag
#                                            per version
# 5. The guest disk image: Debian (debootstrap from the mirror apt uses here) with systemd,
#    containerd, runc, the CNI plugins, the kubelet and kube-proxy as systemd services, booted
#    once under QEMU to import the images into containerd. Cached by versions and a hash of this
#    directory's build inputs (lib.sh image_key): changing any of them builds a new image.
#
# Environment: SLIPWAY_CACHE_DIR (cache root, default ${XDG_CACHE_HOME:-~/.cache}/slipway),
# SLIPWAY_NODES_MIRROR (Debian mirror URL; default: the one in apt's sources), SLIPWAY_NODES_ACCEL.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

command -v go >/dev/null 2>&1 || nodes_die "the Go toolchain is required (Go >= 1.26)"
start_all=$SECONDS
ensure_packages

cluster_bin=$("$cluster_scripts/build.sh" | tail -n 1)

# --- kubelet and kube-proxy -------------------------------------------------------------------
bin=$(node_bin_dir)
mkdir -p "$bin"
k8s_ldflags() { # k8s_ldflags VERSION
  local minor
  minor=$(echo "$1" | cut -d. -f2)
  echo "-s -w -X k8s.io/component-base/version.gitVersion=$1 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
}
go_build() { # go_build OUT_DIR VERSION PACKAGE...
  local out=$1 version=$2
  shift 2
  (cd "$cluster_scripts/go/kubernetes" &&
    CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" GOMAXPROCS="${GOMAXPROCS:-2}" \
      go build -trimpath -ldflags "$(k8s_ldflags "$version")" -o "$out/" "$@")
}
newest=$K8S_VERSION
for v in $(kubelet_versions); do
  if [ "$(printf '%s\n%s\n' "$v" "$newest" | sort -V | tail -n 1)" != "$newest" ]; then
    nodes_die "kubelet version $v is newer than the API server's $K8S_VERSION (versions.env)"
  fi
done
if [ ! -x "$bin/kubelet-$NODE_KUBELET_VERSION" ] || [ ! -x "$bin/kube-proxy" ]; then
  nodes_log "building kubelet and kube-proxy $NODE_KUBELET_VERSION (one go build; cached in $bin)"
  t=$SECONDS tmp="$bin/.tmp-$$"
  rm -rf "$tmp"
  # One invocation for both main packages: Go links one while it still compiles the other.
  go_build "$tmp" "$NODE_KUBELET_VERSION" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
  mv "$tmp/kube-proxy" "$bin/kube-proxy"
  mv "$tmp/kubelet" "$bin/kubelet-$NODE_KUBELET_VERSION"
  rmdir "$tmp"
  nodes_log "built kubelet and kube-proxy in $((SECONDS - t))s"
fi
for v in $NODE_KUBELET_UPGRADES; do
  [ -x "$bin/kubelet-$v" ] && continue
  nodes_log "linking kubelet $v (the same source, another version stamp)"
  t=$SECONDS tmp="$bin/.tmp-$$"
  go_build "$tmp" "$v" k8s.io/kubernetes/cmd/kubelet
  mv "$tmp/kubelet" "$bin/kubelet-$v"
  rmdir "$tmp"
  nodes_log "built kubelet $v in $((SECONDS - t))s"
done

out=$(image_dir)
if [ -f "$out/disk.img" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ]; then
  echo "$out"
  exit 0
fi

# --- the guest image --------------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || nodes_die "building the guest image needs root (debootstrap); running guests does not"
nodes_log "building the guest image $(basename "$out") (first use; cached afterwards)"
work="$out.tmp-$$"
rm -rf "$work"
mkdir -p "$work"
cleanup() {
  local rc=$?
  if [ -n "${qemu_pid:-}" ]; then kill -KILL "$qemu_pid" 2>/dev/null || true; fi
  if [ "$rc" -ne 0 ]; then
    nodes_log "image build failed (exit $rc); kept $work for its logs"
  fi
}
trap cleanup EXIT

# The Debian mirror apt already uses on this machine (deb822 sources or sources.list).
mirror=${SLIPWAY_NODES_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(awk '/^URIs:/ && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
fi
if [ -z "$mirror" ]; then
  mirror=$(awk '$1 == "deb" && $3 == "'"$DEBIAN_SUITE"'" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}

t=$SECONDS
rootfs="$work/rootfs"
packages=systemd-sysv,udev,kmod,iproute2,iptables,conntrack,ca-certificates,mount,util-linux,procps,dbus
packages+=,containerd,runc,containernetworking-plugins,linux-image-amd64,initramfs-tools,zstd
nodes_log "debootstrap $DEBIAN_SUITE from $mirror (packages cached in $cache_root/nodes-debs)"
mkdir -p "$cache_root/nodes-debs"
# Before the kernel package builds the initramfs: only the virtio drivers and ext4 in it (neither
# file is a package's conffile).
install -D -m 0755 "$here/guest/initramfs-hook" "$rootfs/etc/initramfs-tools/hooks/slipway"
install -D -m 0644 "$here/guest/initramfs.conf" "$rootfs/etc/initramfs-tools/conf.d/slipway"
debootstrap --variant=minbase --cache-dir="$cache_root/nodes-debs" --include="$packages" \
  "$DEBIAN_SUITE" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
  { tail -n 20 "$work/debootstrap.log" >&2; nodes_die "debootstrap failed (log: $work/debootstrap.log)"; }
nodes_log "debootstrap done in $((SECONDS - t))s"

t=$SECONDS
kernel_version=$(basename "$(ls "$rootfs"/boot/vmlinuz-*)" | sed 's/^vmlinuz-//')

# The node's own files.
install -m 0755 "$bin/kubelet-$NODE_KUBELET_VERSION" "$rootfs/usr/local/bin/kubelet"
install -m 0755 "$bin/kube-proxy" "$rootfs/usr/local/bin/kube-proxy"
install -m 0755 "$here/guest/slipway-node" "$rootfs/usr/local/sbin/slipway-node"
for unit in slipway-node-setup.service slipway-node-images.service slipway-node-provision.service \
  kubelet.service kube-proxy.service; do
  install -m 0644 "$here/guest/$unit" "$rootfs/etc/systemd/system/$unit"
done
sed "s|@PAUSE_IMAGE@|$PAUSE_IMAGE|" "$here/guest/containerd.toml" >"$rootfs/etc/containerd/config.toml"
install -m 0644 "$here/guest/sysctl.conf" "$rootfs/etc/sysctl.d/90-slipway-node.conf"
install -m 0644 "$here/guest/modules-load.conf" "$rootfs/etc/modules-load.d/slipway-node.conf"
mkdir -p "$rootfs/etc/systemd/journald.conf.d" "$rootfs/etc/kubernetes/pki" "$rootfs/etc/cni/net.d" \
  "$rootfs/var/lib/kubelet" "$rootfs/var/lib/slipway/images"
install -m 0644 "$here/guest/journald.conf" "$rootfs/etc/systemd/journald.conf.d/slipway-node.conf"
install -D -m 0644 "$here/guest/system.conf" "$rootfs/etc/systemd/system.conf.d/slipway-node.conf"
: >"$rootfs/etc/kubernetes/kubelet.env"
echo "slipway-node" >"$rootfs/etc/hostname"
printf '/dev/vda / ext4 rw,noatime 0 1\n' >"$rootfs/etc/fstab"
printf 'nameserver 127.0.0.1\n' >"$rootfs/etc/resolv.conf"
chroot "$rootfs" passwd -d root >/dev/null
systemctl --root="$rootfs" enable slipway-node-setup.service slipway-node-images.service \
  slipway-node-provision.service kubelet.service kube-proxy.service containerd.service >/dev/null 2>&1
# What a node does not need at boot (each unit costs seconds under emulation).
systemctl --root="$rootfs" mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
  e2scrub_reap.service fstrim.timer dpkg-db-backup.timer getty@tty1.service serial-getty@ttyS0.service \
  getty.target systemd-logind.service systemd-update-utmp.service systemd-update-utmp-runlevel.service \
  systemd-pstore.service systemd-journal-flush.service ldconfig.service systemd-hwdb-update.service \
  remote-fs.target systemd-timesyncd.service >/dev/null 2>&1
# No apt cache, lists or docs in the image.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/lib/apt/lists/* \
  "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* "$rootfs"/boot/*.dpkg-bak
nodes_log "guest files in place in $((SECONDS - t))s"

# --- images -----------------------------------------------------------------------------------
t=$SECONDS
images="$rootfs/var/lib/slipway/images"
gcc -static -O2 -Wall -Wextra -o "$work/pause" "$here/pause.c"
strip "$work/pause"
busybox=/bin/busybox # from busybox-static (ensure_packages)
oci() { python3 "$here/oci_archive.py" "$@" 2>>"$work/images.log"; }
oci --out "$images/pause.tar" --tag "$PAUSE_IMAGE" --file "$work/pause:/pause:0755" --entrypoint '["/pause"]'
oci --out "$images/busybox.tar" --tag busybox:1.37 --tag busybox:1.36 --busybox "$busybox" --cmd '["sh"]'
oci --out "$images/kubectl.tar" --tag rancher/kubectl:v1.30.3 --busybox "$busybox" \
  --file "$cluster_bin/kubectl:/bin/kubectl:0755" --entrypoint '["kubectl"]'
upgrade_args=() tags=()
for v in $(kubelet_versions); do
  upgrade_args+=(--file "$bin/kubelet-$v:/kubelets/$v/kubelet:0755")
  tags+=(--tag "$UPGRADE_IMAGE:$v")
done
oci --out "$images/kubelet-upgrade.tar" "${tags[@]}" "${upgrade_args[@]}" --busybox "$busybox" \
  --file "$cluster_bin/kubectl:/bin/kubectl:0755" --file "$here/kubelet-upgrade.sh:/bin/kubelet-upgrade:0755" --entrypoint '["/bin/kubelet-upgrade"]' --cmd '["upgrade"]'
nodes_log "images written in $((SECONDS - t))s"

# --- the disk ---------------------------------------------------------------------------------
t=$SECONDS
cp "$rootfs/boot/vmlinuz-$kernel_version" "$work/vmlinuz"
cp "$rootfs/boot/initrd.img-$kernel_version" "$work/initrd.img"
mke2fs -q -t ext4 -L slipway-root -E lazy_itable_init=0,lazy_journal_init=0 -d "$rootfs" "$work/disk.img" 4G
nodes_log "disk image made in $((SECONDS - t))s"

# --- one boot to import the images into containerd --------------------------------------------
t=$SECONDS
accel=$(accel "$work/vmlinuz")
mapfile -t machine < <(qemu_base_args "$accel" 1024 2)
nodes_log "provisioning boot under QEMU ($accel): imports the images into containerd"
qemu-system-x86_64 "${machine[@]}" -kernel "$work/vmlinuz" -initrd "$work/initrd.img" \
  -append "$GUEST_CMDLINE slipway.provision" -no-reboot \
  -drive "file=$work/disk.img,format=raw,if=virtio,cache=unsafe" \
  -serial "file:$work/provision.log" </dev/null >"$work/qemu.log" 2>&1 &
qemu_pid=$!
deadline=$((SECONDS + 900))
while kill -0 "$qemu_pid" 2>/dev/null; do
  [ "$SECONDS" -lt "$deadline" ] || nodes_die "the provisioning boot did not finish in 900s (console: $work/provision.log)"
  sleep 2
done
qemu_pid=""
grep -q "slipway-node: provisioned" "$work/provision.log" ||
  { tail -n 30 "$work/provision.log" >&2; nodes_die "the provisioning boot failed (console: $work/provision.log)"; }
grep "slipway-node: image" "$work/provision.log" >&2 || true
nodes_log "provisioned in $((SECONDS - t))s"

rm -rf "$rootfs"
rm -rf "$out"
mv "$work" "$out"
trap - EXIT
nodes_log "guest image ready in $((SECONDS - start_all))s: $out"
echo "$out"
