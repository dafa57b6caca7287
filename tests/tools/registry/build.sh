#!/usr/bin/env bash
# Builds the OCI registry server (distribution's `registry`) and `crane` (go-containerregistry's
# client, which scripts/publish.sh pushes with) from the pinned Go module under
# tests/tools/registry/go, once, into a cache outside the repository keyed by versions.env. Prints
# the directory holding both; progress goes to stderr. tests/tools/registry/up.sh starts the
# registry.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../go-tool.sh
source "$here/../go-tool.sh"
bin="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}/registry-$DISTRIBUTION_MODULE_VERSION-crane-$GO_CONTAINERREGISTRY_MODULE_VERSION/bin"
build_tools "$bin" "$here/go" github.com/distribution/distribution/v3/cmd/registry \
  github.com/google/go-containerregistry/cmd/crane
echo "$bin"
