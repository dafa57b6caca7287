#!/usr/bin/env bash
# Builds Helm from the pinned Go module under tests/tools/helm/go (its go.mod names the version), once,
# into a cache outside the repository keyed by version. Prints the binary's path; progress goes to
# stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mod="$here/go"
version=$(sed -n 's|^[[:space:]]*helm\.sh/helm/v3 \(v[^ ]*\).*|\1|p' "$mod/go.mod")
client_go=$(sed -n 's|^[[:space:]]*k8s\.io/client-go v0\.\([0-9]*\)\..*|\1|p' "$mod/go.mod")
if [ -z "$version" ] || [ -z "$client_go" ]; then
  echo "helm build: cannot read the Helm or client-go version from $mod/go.mod" >&2
  exit 1
fi
cache_root="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}"
bin="$cache_root/helm-$version/bin/helm"
# shellcheck source=build-lock.sh
source "$here/../build-lock.sh"
build_lock "$bin"
if [ ! -x "$bin" ]; then
  command -v go >/dev/null 2>&1 || { echo "helm build: the Go toolchain is required (Go >= 1.26)" >&2; exit 1; }
  echo "helm build: building Helm $version (first use; cached in $(dirname "$bin"))" >&2
  mkdir -p "$(dirname "$bin")"
  start=$SECONDS
  # As Helm's own Makefile does: the version, and the Kubernetes version that `helm template` and
  # `helm lint` assume without a cluster (client-go v0.N is Kubernetes 1.N), else they assume 1.20.
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
  for pkg in chartutil lint/rules; do
    ldflags+=" -X helm.sh/helm/v3/pkg/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/$pkg.k8sVersionMinor=$client_go"
  done
  (cd "$mod" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" GOMAXPROCS="${GOMAXPROCS:-2}" \
    go build -trimpath -ldflags "$ldflags" -o "$bin.tmp.$$" helm.sh/helm/v3/cmd/helm)
  mv "$bin.tmp.$$" "$bin"
  echo "helm build: built in $((SECONDS - start))s" >&2
fi
echo "$bin"
