# shellcheck shell=bash
# Sourced by scripts/image.sh and scripts/ci.sh: the environment of a static slipway build, so that
# CI's one compile (tests, clippy, fuzz targets) also gives the image's binary.
#
#   SLIPWAY_STATIC_TARGET  the host's target triple, to pass as --target: it keeps the static flags
#                          off build scripts and proc macros, which run on the host
#   RUSTFLAGS              glibc linked statically (crt-static), the cargo registry's paths
#                          remapped; for a release build (the image people run) this checkout's
#                          too, so that any clone builds the same bytes. CI's dev-profile build
#                          keeps the checkout's path: the compiled dependencies then do not depend
#                          on where the clone is, and CI keeps them between runs (scripts/ci.sh).
#   SLIPWAY_COMMIT         slipway_build_info's commit label, the same for every build of a commit
# Needs $root (the checkout).
: "${root:?static-env.sh needs root, the checkout}"
SLIPWAY_STATIC_TARGET=$(rustc -vV | sed -n 's/^host: //p')
export SLIPWAY_STATIC_TARGET
RUSTFLAGS="-C target-feature=+crt-static --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
if [ "${SLIPWAY_IMAGE_PROFILE:-release}" = release ]; then
  RUSTFLAGS="$RUSTFLAGS --remap-path-prefix=$root=/slipway"
fi
export RUSTFLAGS
if [ -z "${SLIPWAY_COMMIT:-}" ]; then
  SLIPWAY_COMMIT=$(git -C "$root" rev-parse HEAD 2>/dev/null || true)
fi
export SLIPWAY_COMMIT
