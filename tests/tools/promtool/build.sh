#!/usr/bin/env bash
# Builds promtool from the pinned Go module under tests/tools/promtool/go, once, into a cache outside
# the repository keyed by version. Prints the binary's path; progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache_root="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}"
bin="$cache_root/promtool-$PROMETHEUS_MODULE_VERSION/bin/promtool"
# shellcheck source=build-lock.sh
source "$here/../build-lock.sh"
build_lock "$bin"
if [ ! -x "$bin" ]; then
  command -v go >/dev/null 2>&1 || { echo "promtool build: the Go toolchain is required (Go >= 1.26)" >&2; exit 1; }
  echo "promtool build: building promtool (github.com/prometheus/prometheus $PROMETHEUS_MODULE_VERSION; first use; cached in $(dirname "$bin"))" >&2
  mkdir -p "$(dirname "$bin")"
  start=$SECONDS
  # remove_all_sd: promtool without the service-discovery plugins (cloud SDKs), which rule checks
  # and rule tests do not use; it halves what is downloaded and compiled.
  (cd "$here/go" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" GOMAXPROCS="${GOMAXPROCS:-2}" \
    go build -trimpath -tags remove_all_sd -ldflags "-s -w" -o "$bin.tmp.$$" github.com/prometheus/prometheus/cmd/promtool)
  mv "$bin.tmp.$$" "$bin"
  echo "promtool build: built in $((SECONDS - start))s" >&2
fi
echo "$bin"
