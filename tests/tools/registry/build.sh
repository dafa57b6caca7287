#!/usr/bin/env bash
# Builds the OCI registry server (distribution's `registry`) and `crane` (go-containerregistry's
# client, which pushes to it) from the pinned Go module under tests/tools/registry/go, once, into a
# cache outside the repository keyed by versions.env. Prints the directory holding both binaries;
# progress goes to stderr. tests/tools/registry/up.sh starts the registry.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache_root="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}"
bin="$cache_root/registry-$DISTRIBUTION_MODULE_VERSION-crane-$GO_CONTAINERREGISTRY_MODULE_VERSION/bin"
# shellcheck source=build-lock.sh
source "$here/../build-lock.sh"
build_lock "$bin/crane"
if [ ! -x "$bin/registry" ] || [ ! -x "$bin/crane" ]; then
  command -v go >/dev/null 2>&1 || { echo "registry build: the Go toolchain is required (Go >= 1.26)" >&2; exit 1; }
  echo "registry build: building the registry (distribution $DISTRIBUTION_MODULE_VERSION) and crane (go-containerregistry $GO_CONTAINERREGISTRY_MODULE_VERSION); first use, cached in $bin" >&2
  mkdir -p "$bin"
  start=$SECONDS
  for tool in github.com/distribution/distribution/v3/cmd/registry github.com/google/go-containerregistry/cmd/crane; do
    (cd "$here/go" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" GOMAXPROCS="${GOMAXPROCS:-2}" \
      go build -trimpath -ldflags "-s -w" -o "$bin/.$(basename "$tool").tmp.$$" "$tool")
    mv "$bin/.$(basename "$tool").tmp.$$" "$bin/$(basename "$tool")"
  done
  echo "registry build: built in $((SECONDS - start))s" >&2
fi
echo "$bin"
