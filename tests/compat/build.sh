#!/usr/bin/env bash
# Builds system-upgrade-controller from the pinned Go module under tests/compat/go/suc, once, into a
# cache outside the repository keyed by version. Prints the binary's path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache_root="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}"
bin="$cache_root/suc-$SUC_VERSION/bin/system-upgrade-controller"
# shellcheck source=../tools/build-lock.sh
source "$here/../tools/build-lock.sh"
build_lock "$bin"
if [ ! -x "$bin" ]; then
  command -v go >/dev/null 2>&1 || { echo "compat build: the Go toolchain is required (Go >= 1.26)" >&2; exit 1; }
  echo "compat build: building system-upgrade-controller $SUC_VERSION (first use; cached in $(dirname "$bin"))" >&2
  mkdir -p "$(dirname "$bin")"
  start=$SECONDS
  (cd "$here/go/suc" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" GOMAXPROCS="${GOMAXPROCS:-2}" \
    go build -trimpath -ldflags "-s -w" -o "$bin.tmp" github.com/rancher/system-upgrade-controller)
  mv "$bin.tmp" "$bin"
  echo "compat build: built in $((SECONDS - start))s" >&2
fi
# The scenes that run SUC with its own manifests read them from its module (kubectl kustomize):
# it must be in Go's module cache even when the binary was built before (a module cache pruned
# since then failed the k3s pair scene under SUC, CI 2026-11-27).
(cd "$here/go/suc" && GOFLAGS="-mod=readonly" go mod download github.com/rancher/system-upgrade-controller)
echo "$bin"
