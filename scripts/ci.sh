#!/usr/bin/env bash
# Every check CI runs (`just ci`, which `./dev test` and .ci/run call), timed, with one report at
# the end of where the time went.
#
# One compile of the Rust code serves every check: the dev profile, linked statically (as the
# image's binary must be), with clippy as the compiler of the workspace's own crates (-D warnings),
# for the library, the binary, the tests, the benches and the fuzz targets; CI's image is built
# from that same binary (a release build would compile everything again). The Go tools build in
# the background meanwhile. Then the tests: unit and offline, then the end-to-end scenes, side by
# side, against one local cluster.
#
# Report: target/ci/report.txt (each phase and each scene with its seconds, and the total); logs
# of each phase in target/ci/logs/.
#   SLIPWAY_E2E=skip          skip the end-to-end scenes (loudly)
#   SLIPWAY_E2E_SCENES=N      scenes at once (default 6; tests/e2e/support/turns.rs orders them)
#   SLIPWAY_E2E_FILTER=...    only the scenes whose name contains it (libtest's filter)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

ci=$root/target/ci
logs=$ci/logs
rm -rf "$ci"
mkdir -p "$logs"
phases=$ci/phases.tsv
export SLIPWAY_TEST_REPORT=$ci/scenes.tsv
: >"$phases"
: >"$SLIPWAY_TEST_REPORT"
started=$(date +%s)

say() { echo "ci: $*" >&2; }

# phase NAME COMMAND... : runs COMMAND, its output in logs/NAME.log (and on the console too when
# SHOW=1), and records how long it took; on failure prints the end of the log and returns 1.
phase() {
  local name=$1 start rc=0
  shift
  start=$(date +%s)
  say "$name"
  if [ "${SHOW:-0}" = 1 ]; then
    "$@" 2>&1 | tee "$logs/$name.log" || rc=$?
  else
    "$@" >"$logs/$name.log" 2>&1 || rc=$?
  fi
  local took=$(($(date +%s) - start)) outcome=ok
  [ "$rc" -eq 0 ] || outcome=FAILED
  printf 'phase\t%s\t%s\t%s\n' "$name" "$outcome" "$took" >>"$phases"
  if [ "$rc" -ne 0 ]; then
    [ "${SHOW:-0}" = 1 ] || tail -n 60 "$logs/$name.log" >&2
    say "$name FAILED after ${took}s (log: $logs/$name.log)"
    return 1
  fi
  say "$name ok (${took}s)"
}

report() {
  local total=$(($(date +%s) - started))
  {
    echo "== where the time went (seconds; phases in the order they ended; the tools build in the background) =="
    awk -F'\t' '{ printf "%-34s %-7s %6d\n", $2, $3, $4 }' "$phases"
    if [ -s "$SLIPWAY_TEST_REPORT" ]; then
      echo "-- scenes, longest first (seconds running, seconds waiting for their turn) --"
      sort -t$'\t' -k4,4nr "$SLIPWAY_TEST_REPORT" |
        awk -F'\t' '{ printf "%-72s %-7s %6.1f %6.1f\n", $2, $3, $4, $5 }'
      awk -F'\t' '{ n++; s += $4; if ($3 != "ok") f++ } END { printf "%d scenes, %d not ok, %.0f scene-seconds\n", n, f, s }' "$SLIPWAY_TEST_REPORT"
    fi
    echo "total: ${total}s ($((total / 60)) min $((total % 60)) s)"
  } | tee "$ci/report.txt" >&2
}
tools=""
finish() {
  # A failure in the foreground leaves no tool build running behind it.
  [ -z "$tools" ] || kill "$tools" 2>/dev/null || true
  report
}
trap finish EXIT

# --- the build -------------------------------------------------------------------------------
# Go tools, in the background: helm, promtool, alertmanager and kstatus first (the offline tests
# need them), then the local cluster, the real nodes' guest image (its kubelet from the cluster's
# module), SUC (the differential test) and the image checker.
(
  phase helm tests/tools/helm/build.sh
  phase promtool tests/tools/promtool/build.sh
  phase alertmanager tests/tools/alertmanager/build.sh
  phase kstatus tests/tools/kstatus/build.sh
  phase cluster-binaries tests/cluster/build.sh
  phase real-nodes tests/nodes/build.sh
  phase suc tests/compat/build.sh
  phase ocicheck tests/tools/ocicheck.sh
) &
tools=$!

# The quick-start scene builds the image again from this compile; it must not be a release build.
export SLIPWAY_IMAGE_PROFILE=dev
# shellcheck source=scripts/static-env.sh
source "$root/scripts/static-env.sh"
target=$SLIPWAY_STATIC_TARGET
# The compiled dependencies are kept between runs, outside the clone, per toolchain and lockfile
# (the two newest are kept). slipway's own crates are compiled afresh: their old artifacts, from
# this or another clone, are removed first.
if [ -z "${CARGO_TARGET_DIR:-}" ]; then
  cache_root="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}"
  key=$({ rustc -vV; cat Cargo.lock; } | sha256sum | cut -c1-16)
  export CARGO_TARGET_DIR=$cache_root/cargo-target/$key
  mkdir -p "$CARGO_TARGET_DIR"
  touch "$CARGO_TARGET_DIR"
  # shellcheck disable=SC2012 # names are ours: hex keys
  ls -1t "$cache_root/cargo-target" | tail -n +3 | while read -r old; do rm -rf "${cache_root:?}/cargo-target/$old"; done
  phase clean cargo clean --locked --target "$target" -p slipway -p slipway-fuzz
fi
clippy=$(command -v clippy-driver || rustup which clippy-driver)
export RUSTC_WORKSPACE_WRAPPER=$clippy
# cargo clippy's way of passing lint flags to clippy-driver.
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

phase fmt cargo fmt --all -- --check
# The workspace's default members: slipway and its fuzz targets.
phase build cargo build --locked --target "$target" --all-targets
phase image scripts/image.sh
# The top-level Containerfile built by buildah, against that image.
phase containerfile tests/containerfile/engine.sh
SHOW=1 phase unit cargo test --locked --target "$target" --lib --bin slipway
SHOW=1 phase doc cargo test --locked --target "$target" --doc
# linux/arm64: the binary cross-built (its dependencies kept with the others) and run under qemu.
phase arm64 scripts/arm64.sh

if ! wait "$tools"; then
  tools=""
  say "a tool build failed (its log is in $logs)"
  exit 1
fi
tools=""
PATH="$(tests/cluster/build.sh):$PATH"
export PATH
SHOW=1 phase offline cargo test --locked --target "$target" --test offline
# What a release ships, from this compile: the CLI's archives and the two-platform image.
phase release tests/release/check.sh

# --- the end-to-end scenes -------------------------------------------------------------------
# The real nodes import the image this run built.
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
export SLIPWAY_IMAGE_ARCHIVE="$root/target/image/slipway-$version.oci.tar"
# A thread for every scene: each asks for its turn at once, and the scenes' own scheduler starts
# them, SLIPWAY_E2E_SCENES at a time, longest chains first.
e2e=(cargo test --locked --target "$target" --test e2e -- --test-threads=512)
[ -z "${SLIPWAY_E2E_FILTER:-}" ] || e2e+=("$SLIPWAY_E2E_FILTER")
if [ "${SLIPWAY_E2E:-}" = skip ]; then
  SHOW=1 phase e2e "${e2e[@]}"
else
  SHOW=1 phase e2e tests/cluster/with-cluster.sh "${e2e[@]}"
fi
