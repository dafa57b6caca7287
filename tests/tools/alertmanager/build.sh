#!/usr/bin/env bash
# Builds alertmanager from the pinned Go module under tests/tools/alertmanager/go, once, into a cache
# outside the repository keyed by version. Prints the binary's path; progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache_root="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}"
bin="$cache_root/alertmanager-$ALERTMANAGER_MODULE_VERSION/bin/alertmanager"
# shellcheck source=build-lock.sh
source "$here/../build-lock.sh"
build_lock "$bin"
if [ ! -x "$bin" ]; then
  command -v go >/dev/null 2>&1 || { echo "alertmanager build: the Go toolchain is required (Go >= 1.26)" >&2; exit 1; }
  echo "alertmanager build: building alertmanager (github.com/prometheus/alertmanager $ALERTMANAGER_MODULE_VERSION; first use; cached in $(dirname "$bin"))" >&2
  mkdir -p "$(dirname "$bin")"
  start=$SECONDS
  # The module as the proxy serves it has no compiled web UI (ui/app/dist is built by npm for a
  # release), which ui/web.go embeds; the module cache cannot be overlaid. So the build uses a copy
  # of the module whose ui/web.go is overlay/web.go (a UI that registers nothing), through a
  # temporary go.mod that replaces the module with that copy.
  work=$(mktemp -d)
  trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
  (cd "$here/go" && GOFLAGS=-mod=readonly go mod download github.com/prometheus/alertmanager)
  dir=$(cd "$here/go" && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' github.com/prometheus/alertmanager)
  cp -R "$dir" "$work/alertmanager"
  chmod -R u+w "$work/alertmanager"
  cp "$here/overlay/web.go" "$work/alertmanager/ui/web.go"
  cp "$here/go/go.mod" "$work/go.mod"
  cp "$here/go/go.sum" "$work/go.sum"
  echo "replace github.com/prometheus/alertmanager => $work/alertmanager" >> "$work/go.mod"
  (cd "$here/go" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=mod" GOMAXPROCS="${GOMAXPROCS:-2}" \
    go build -modfile "$work/go.mod" -trimpath -ldflags "-s -w" -o "$bin.tmp.$$" github.com/prometheus/alertmanager/cmd/alertmanager)
  mv "$bin.tmp.$$" "$bin"
  echo "alertmanager build: built in $((SECONDS - start))s" >&2
fi
echo "$bin"
