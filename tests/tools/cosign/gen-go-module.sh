#!/usr/bin/env bash
# Regenerates the pinned wrapper Go module under tests/tools/cosign/go from versions.env.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../go-tool.sh
source "$here/../go-tool.sh"
gen_tool_module "$here/go" cosign "github.com/sigstore/cosign/v2/cmd/cosign@$COSIGN_MODULE_VERSION"
