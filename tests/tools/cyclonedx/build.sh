#!/usr/bin/env bash
# Installs cargo-cyclonedx (the CycloneDX project's SBOM generator for Cargo) from crates.io, once,
# into a cache outside the repository keyed by version. Prints the binary's path; progress goes to
# stderr. It is built as cargo installs it: none of the caller's build settings (CI's target
# directory, clippy as its compiler, the static build's flags) apply to it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The SBOMs of a release (scripts/cut-release.sh): the binary's dependencies, from Cargo.lock.
CARGO_CYCLONEDX_VERSION=0.5.9
root="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}/cargo-cyclonedx-$CARGO_CYCLONEDX_VERSION"
bin="$root/bin/cargo-cyclonedx"
# shellcheck source=../build-lock.sh
source "$here/../build-lock.sh"
build_lock "$bin"
if [ ! -x "$bin" ]; then
  echo "cyclonedx build: installing cargo-cyclonedx $CARGO_CYCLONEDX_VERSION (first use; cached in $root)" >&2
  start=$SECONDS
  env -u CARGO_TARGET_DIR -u RUSTC_WORKSPACE_WRAPPER -u RUSTC_WRAPPER -u CLIPPY_ARGS -u RUSTFLAGS \
    -u CARGO_BUILD_TARGET -u CARGO_INCREMENTAL \
    cargo install --locked --quiet --version "$CARGO_CYCLONEDX_VERSION" --root "$root" cargo-cyclonedx >&2
  echo "cyclonedx build: installed in $((SECONDS - start))s" >&2
fi
echo "$bin"
