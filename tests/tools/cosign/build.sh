#!/usr/bin/env bash
# Builds cosign from the pinned Go module under tests/tools/cosign/go, once, into a cache outside
# the repository keyed by version. Prints the binary's path; progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../go-tool.sh
source "$here/../go-tool.sh"
bin="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}/cosign-$COSIGN_MODULE_VERSION/bin"
build_tools "$bin" "$here/go" github.com/sigstore/cosign/v2/cmd/cosign
echo "$bin/cosign"
