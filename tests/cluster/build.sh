#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd and kwok from the pinned Go
# modules under tests/cluster/go/, once, into a cache outside the repository keyed by version.
# Prints the directory that holds the binaries. Later runs only check that the binaries are there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache_root="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}"
bin_dir="$cache_root/cluster-k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION/bin"
mkdir -p "$bin_dir"

log() { echo "cluster build: $*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "the Go toolchain is required to build the local cluster (Go >= 1.26)"; exit 1
fi

export CGO_ENABLED=0
export GOFLAGS="-buildvcs=false -mod=readonly"
# Two cores: more parallel compiles only add memory pressure.
export GOMAXPROCS="${GOMAXPROCS:-2}"

build() { # build NAME MODULE_DIR PACKAGE LDFLAGS
  local name=$1 module=$2 package=$3 ldflags=$4
  if [ -x "$bin_dir/$name" ]; then return 0; fi
  log "building $name (first use; cached afterwards in $bin_dir)"
  local start=$SECONDS tmp="$bin_dir/.$name.tmp"
  (cd "$here/go/$module" && go build -trimpath -ldflags "$ldflags" -o "$tmp" "$package")
  mv "$tmp" "$bin_dir/$name"
  log "built $name in $((SECONDS - start))s"
}

minor=$(echo "$K8S_VERSION" | cut -d. -f2)
k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean"

build etcd etcd go.etcd.io/etcd/server/v3 "-s -w"
build kwok kwok sigs.k8s.io/kwok/cmd/kwok "-s -w"
build kube-apiserver kubernetes k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags"
build kube-controller-manager kubernetes k8s.io/kubernetes/cmd/kube-controller-manager "$k8s_ldflags"
build kube-scheduler kubernetes k8s.io/kubernetes/cmd/kube-scheduler "$k8s_ldflags"
# kubectl: a module of its own (go/kubectl), since kube-apiserver's does not need kubectl's packages.
build kubectl kubectl slipway.dev/tests/cluster/kubectl "$k8s_ldflags \
 -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=$minor"

echo "$bin_dir"
