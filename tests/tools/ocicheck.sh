#!/usr/bin/env bash
# Builds tests/tools/ocicheck (go-containerregistry's image validators) once, into a cache outside
# the repository keyed by its go.sum. Prints the binary's path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The files' contents only: sha256sum's own output names each file by its path, which made every
# clone of the repository a new key (and a new build).
key=$(cat "$here/ocicheck/go.sum" "$here/ocicheck/main.go" | sha256sum | cut -c1-12)
cache_root="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}"
bin="$cache_root/ocicheck-$key/bin/ocicheck"
# shellcheck source=build-lock.sh
source "$here/build-lock.sh"
build_lock "$bin"
if [ ! -x "$bin" ]; then
  command -v go >/dev/null 2>&1 || { echo "ocicheck build: the Go toolchain is required (Go >= 1.26)" >&2; exit 1; }
  echo "ocicheck build: building the image checker (go-containerregistry; first use, cached in $(dirname "$bin"))" >&2
  mkdir -p "$(dirname "$bin")"
  start=$SECONDS
  (cd "$here/ocicheck" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" go build -trimpath -o "$bin.tmp" .)
  mv "$bin.tmp" "$bin"
  echo "ocicheck build: built in $((SECONDS - start))s" >&2
fi
echo "$bin"
