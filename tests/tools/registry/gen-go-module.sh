#!/usr/bin/env bash
# Regenerates the pinned wrapper Go module under tests/tools/registry/go from versions.env.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../go-tool.sh
source "$here/../go-tool.sh"
gen_tool_module "$here/go" registry \
  "github.com/distribution/distribution/v3/cmd/registry@$DISTRIBUTION_MODULE_VERSION" \
  "github.com/google/go-containerregistry/cmd/crane@$GO_CONTAINERREGISTRY_MODULE_VERSION"
