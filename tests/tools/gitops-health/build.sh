#!/usr/bin/env bash
# Builds tests/tools/gitops-health (kstatus, Argo CD's Lua health engine and wrangler's summary,
# which Fleet judges by, behind one JSON filter) from the pinned Go module here, once, into a cache
# outside the repository keyed by the module's versions and this tool's source. Prints the
# binary's path; progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version() { sed -n "s|^[[:space:]]*$1 \(v[^ ]*\).*|\1|p" "$here/go.mod" | head -n 1; }
argocd=$(version 'github\.com/argoproj/argo-cd/v3')
kstatus=$(version 'sigs\.k8s\.io/cli-utils')
wrangler=$(version 'github\.com/rancher/wrangler/v3')
if [ -z "$argocd" ] || [ -z "$kstatus" ] || [ -z "$wrangler" ]; then
  echo "gitops-health build: cannot read the argo-cd, cli-utils and wrangler versions from $here/go.mod" >&2
  exit 1
fi
source_key=$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-12)
cache_root="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}"
bin="$cache_root/gitops-health-argocd-$argocd-cli-utils-$kstatus-wrangler-$wrangler-$source_key/bin/gitops-health"
# shellcheck source=build-lock.sh
source "$here/../build-lock.sh"
build_lock "$bin"
if [ ! -x "$bin" ]; then
  command -v go >/dev/null 2>&1 || { echo "gitops-health build: the Go toolchain is required (Go >= 1.26)" >&2; exit 1; }
  echo "gitops-health build: building the GitOps health checker (argo-cd $argocd, cli-utils $kstatus, wrangler $wrangler; first use; cached in $(dirname "$bin"))" >&2
  mkdir -p "$(dirname "$bin")"
  start=$SECONDS
  (cd "$here" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" GOMAXPROCS="${GOMAXPROCS:-2}" \
    go build -trimpath -ldflags "-s -w" -o "$bin.tmp.$$" .)
  mv "$bin.tmp.$$" "$bin"
  echo "gitops-health build: built in $((SECONDS - start))s" >&2
fi
echo "$bin"
