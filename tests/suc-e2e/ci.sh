#!/usr/bin/env bash
# SUC's own end-to-end suite, as CI runs it (scripts/ci.sh): three runs, each on a fresh local
# cluster, every spec of SUC v0.20.1 as SUC wrote it:
#   1. SUC v0.20.1 itself, the reference (its binary from tests/compat/build.sh);
#   2. slipway, on the Plan CRD it registers;
#   3. slipway on SUC's own Plan CRD (SLIPWAY_INSTALL_CRD=false), as where SUC's chart owns it.
# Each run fails on a failed spec or a namespace left Terminating (run.sh). Prints one line per run.
#
#   tests/suc-e2e/ci.sh SLIPWAY_BINARY [LOG_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "usage: $0 SLIPWAY_BINARY [LOG_DIR]" >&2; exit 2; }
slipway=$1
logs=${2:-$(mktemp -d /tmp/slipway-suc-e2e-ci.XXXXXX)}
mkdir -p "$logs"
"$here/build.sh" >/dev/null
suc=$("$here/../compat/build.sh" | tail -n 1)
failed=0
run() {
  local name=$1
  shift
  local start=$SECONDS rc=0
  env SLIPWAY_SUC_E2E_DIR="$logs/$name" "$@" >"$logs/$name.log" 2>&1 || rc=$?
  local ran
  ran=$(grep -aoE 'Ran [0-9]+ of [0-9]+ Specs' "$logs/$name/suite.log" 2>/dev/null | tail -n 1 || true)
  local passed
  passed=$(grep -aoE '[0-9]+ Passed' "$logs/$name/suite.log" 2>/dev/null | tail -n 1 || true)
  echo "suc-e2e: $name: ${ran:-no specs ran}, ${passed:-0 Passed}, exit $rc, $((SECONDS - start)) s (log: $logs/$name.log)"
  if [ "$rc" != 0 ]; then
    grep -aE '\[FAIL\]|Terminating' "$logs/$name.log" "$logs/$name/suite.log" 2>/dev/null | head -n 20 || true
    failed=1
  fi
}
run suc "$here/run.sh" "$suc"
run slipway env SLIPWAY_SUC_E2E_ARGS=run "$here/run.sh" "$slipway"
run slipway-on-sucs-crd env SLIPWAY_SUC_E2E_ARGS=run SLIPWAY_SUC_E2E_CRD=suc "$here/run.sh" "$slipway"
exit "$failed"
