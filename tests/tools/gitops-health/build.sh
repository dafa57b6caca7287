#!/usr/bin/env bash
# Builds tests/tools/kstatus (cli-utils' kstatus checker behind a JSON filter) from the pinned Go
# module here (its go.mod names the cli-utils version), once, into a cache outside the repository
# keyed by that version. Prints the binary's path; progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(sed -n 's|^[[:space:]]*sigs\.k8s\.io/cli-utils \(v[^ ]*\).*|\1|p' "$here/go.mod")
if [ -z "$version" ]; then
  echo "kstatus build: cannot read the cli-utils version from $here/go.mod" >&2
  exit 1
fi
cache_root="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}"
bin="$cache_root/kstatus-$version/bin/kstatus"
# shellcheck source=build-lock.sh
source "$here/../build-lock.sh"
build_lock "$bin"
if [ ! -x "$bin" ]; then
  command -v go >/dev/null 2>&1 || { echo "kstatus build: the Go toolchain is required (Go >= 1.26)" >&2; exit 1; }
  echo "kstatus build: building the kstatus checker (sigs.k8s.io/cli-utils $version; first use; cached in $(dirname "$bin"))" >&2
  mkdir -p "$(dirname "$bin")"
  start=$SECONDS
  (cd "$here" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" GOMAXPROCS="${GOMAXPROCS:-2}" \
    go build -trimpath -ldflags "-s -w" -o "$bin.tmp.$$" .)
  mv "$bin.tmp.$$" "$bin"
  echo "kstatus build: built in $((SECONDS - start))s" >&2
fi
echo "$bin"
