#!/usr/bin/env bash
# Builds actionlint from the pinned Go module under tests/tools/actionlint/go, once, into a cache
# outside the repository keyed by version. Prints the binary's path; progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache_root="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}"
bin="$cache_root/actionlint-$ACTIONLINT_MODULE_VERSION/bin/actionlint"
# shellcheck source=build-lock.sh
source "$here/../build-lock.sh"
build_lock "$bin"
if [ ! -x "$bin" ]; then
  command -v go >/dev/null 2>&1 || { echo "actionlint build: the Go toolchain is required (Go >= 1.26)" >&2; exit 1; }
  echo "actionlint build: building actionlint (github.com/rhysd/actionlint $ACTIONLINT_MODULE_VERSION; first use; cached in $(dirname "$bin"))" >&2
  mkdir -p "$(dirname "$bin")"
  start=$SECONDS
  (cd "$here/go" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" GOMAXPROCS="${GOMAXPROCS:-2}" \
    go build -trimpath -ldflags "-s -w" -o "$bin.tmp.$$" github.com/rhysd/actionlint/cmd/actionlint)
  mv "$bin.tmp.$$" "$bin"
  echo "actionlint build: built in $((SECONDS - start))s" >&2
fi
echo "$bin"
