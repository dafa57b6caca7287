# shellcheck shell=bash
# Sourced by scripts/image.sh and scripts/ci.sh: the environment of a static slipway build, so that
# CI's one compile (tests, clippy, fuzz targets) also gives the image's binary.
#
#   SLIPWAY_STATIC_TARGET  the host's target triple, to pass as --target: it keeps the static flags
#                          off build scripts and proc macros, which run on the host
#   RUSTFLAGS              glibc linked statically (crt-static); this checkout's and the cargo
#                          registry's paths remapped, so any clone builds the same bytes
#   SLIPWAY_COMMIT         slipway_build_info's commit label, the same for every build of a commit
# Needs $root (the checkout).
: "${root:?static-env.sh needs root, the checkout}"
SLIPWAY_STATIC_TARGET=$(rustc -vV | sed -n 's/^host: //p')
export SLIPWAY_STATIC_TARGET
export RUSTFLAGS="-C target-feature=+crt-static --remap-path-prefix=$root=/slipway --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
if [ -z "${SLIPWAY_COMMIT:-}" ]; then
  SLIPWAY_COMMIT=$(git -C "$root" rev-parse HEAD 2>/dev/null || true)
fi
export SLIPWAY_COMMIT
