#!/usr/bin/env bash
# Regenerates the pinned wrapper Go module under tests/tools/promtool/go from versions.env.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../go-tool.sh
source "$here/../go-tool.sh"
gen_tool_module "$here/go" promtool "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE_VERSION"
