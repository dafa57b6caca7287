#!/usr/bin/env bash
# Builds promtool from the pinned Go module under tests/tools/promtool/go, once, into a cache outside
# the repository keyed by version. Prints the binary's path; progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../go-tool.sh
source "$here/../go-tool.sh"
bin="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}/promtool-$PROMETHEUS_MODULE_VERSION/bin"
# remove_all_sd: promtool without the service-discovery plugins (cloud SDKs), which rule checks
# and rule tests do not use; it halves what is downloaded and compiled.
GO_BUILD_TAGS=remove_all_sd build_tools "$bin" "$here/go" github.com/prometheus/prometheus/cmd/promtool
echo "$bin/promtool"
