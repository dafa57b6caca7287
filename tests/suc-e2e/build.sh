#!/usr/bin/env bash
# Builds SUC's own end-to-end suite (the Ginkgo specs of package e2e/suite of
# github.com/rancher/system-upgrade-controller, at SUC_VERSION of tests/compat/versions.env) as a
# test binary, from the pinned Go module under tests/suc-e2e/go, once, into a cache outside the
# repository keyed by version. Prints the binary's path. Nothing of SUC's code is changed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../compat/versions.env
source "$here/../compat/versions.env"
cache_root="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}"
bin="$cache_root/suc-e2e-$SUC_VERSION/bin/system-upgrade-controller.test"
# shellcheck source=../tools/build-lock.sh
source "$here/../tools/build-lock.sh"
build_lock "$bin"
if [ ! -x "$bin" ]; then
  command -v go >/dev/null 2>&1 || { echo "suc-e2e build: the Go toolchain is required (Go >= 1.26)" >&2; exit 1; }
  echo "suc-e2e build: building the e2e suite of system-upgrade-controller $SUC_VERSION (first use; cached in $(dirname "$bin"))" >&2
  mkdir -p "$(dirname "$bin")"
  start=$SECONDS
  (cd "$here/go" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" GOMAXPROCS="${GOMAXPROCS:-2}" \
    go test -c -trimpath -ldflags "-s -w" -o "$bin.tmp" github.com/rancher/system-upgrade-controller/e2e/suite)
  mv "$bin.tmp" "$bin"
  echo "suc-e2e build: built in $((SECONDS - start))s" >&2
fi
echo "$bin"
