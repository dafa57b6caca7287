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
#                          A release build also takes the profile of pgo/ (below).
#   SLIPWAY_CROSS_RUSTFLAGS  the same for a build for another target (no rust-lld-only flags)
#   slipway_pgo_used BIN   says whether a release binary was built with the profile
#   SLIPWAY_COMMIT         slipway_build_info's commit label, the same for every build of a commit
# Needs $root (the checkout).
: "${root:?static-env.sh needs root, the checkout}"
SLIPWAY_STATIC_TARGET=$(rustc -vV | sed -n 's/^host: //p')
export SLIPWAY_STATIC_TARGET
RUSTFLAGS="-C target-feature=+crt-static --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
if [ "${SLIPWAY_IMAGE_PROFILE:-release}" = release ]; then
  RUSTFLAGS="$RUSTFLAGS --remap-path-prefix=$root=/slipway"
fi
# A release build is profile-guided: pgo/slipway.profdata.xz, LLVM's counters from the
# 1,000-node rollout (scripts/pgo.sh, `just pgo`, makes it again), lays the code out by use
# (hot, then the rest, then what never ran: less of it resident) and optimizes the hot paths;
# docs/performance.md has the figures. A function changed since the profile was made is built
# without it. The unpacked profile's name is its checksum, so that cargo rebuilds when it
# changes. SLIPWAY_PGO=off builds without it. -z keep-text-section-prefix makes rust-lld group
# the code by use; GNU ld (the arm64 cross linker) does so by default and says it ignores it.
unset SLIPWAY_PGO_PROFILE SLIPWAY_PGO_ORDER
# slipway_unpacked FILE.xz SUFFIX: FILE unpacked into target/pgo, named by its checksum; its path.
slipway_unpacked() {
  local to
  to=$root/target/pgo/slipway-$(sha256sum "$1" | cut -c1-16).$2
  if [ ! -f "$to" ]; then
    command -v xz >/dev/null || {
      echo "static-env: xz unpacks $1 (apt-get install xz-utils); SLIPWAY_PGO=off builds without it" >&2
      return 1
    }
    mkdir -p "$root/target/pgo"
    xz -dc "$1" > "$to.tmp"
    mv "$to.tmp" "$to"
  fi
  echo "$to"
}
if [ "${SLIPWAY_IMAGE_PROFILE:-release}" = release ] && [ "${SLIPWAY_PGO:-on}" != off ] &&
  [ -f "$root/pgo/slipway.profdata.xz" ]; then
  SLIPWAY_PGO_PROFILE=$(slipway_unpacked "$root/pgo/slipway.profdata.xz" profdata) || return 1
  RUSTFLAGS="$RUSTFLAGS -Cprofile-use=$SLIPWAY_PGO_PROFILE -Clink-arg=-Wl,-z,keep-text-section-prefix"
fi
# Builds for another target (image.sh, release.sh, arm64.sh) take these, without rust-lld's own.
SLIPWAY_CROSS_RUSTFLAGS=$RUSTFLAGS
# And rust-lld (x86_64's linker) puts first, in each of those groups, the functions the profile saw
# run (pgo/slipway.order.xz, written with the profile): many ran a few times only, so LLVM counts
# them cold, and scattered among what never ran they made the kernel map most of that code too.
if [ -n "${SLIPWAY_PGO_PROFILE:-}" ] && [ "$SLIPWAY_STATIC_TARGET" = x86_64-unknown-linux-gnu ] &&
  [ -f "$root/pgo/slipway.order.xz" ]; then
  SLIPWAY_PGO_ORDER=$(slipway_unpacked "$root/pgo/slipway.order.xz" order) || return 1
  RUSTFLAGS="$RUSTFLAGS -Clink-arg=-Wl,--symbol-ordering-file=$SLIPWAY_PGO_ORDER -Clink-arg=-Wl,--no-warn-symbol-ordering"
fi
export RUSTFLAGS SLIPWAY_CROSS_RUSTFLAGS
# slipway_pgo_used BINARY: whether a release build was laid out by the profile. Most of the code
# never ran in training, so rust-lld's .text.unlikely is then larger than .text (3.8 and 14.4 MB
# on 2026-11-29; 24.6 and 4.0 for a build the profile missed). The profile names functions by
# symbol, and cargo derives every crate's symbols from the release profile's settings too (strip
# among them: Cargo.toml's `strip = "symbols"`, which the training had) and from rustc's version: a
# build that differs there (CARGO_PROFILE_RELEASE_STRIP=none, say) gets nothing of the profile, and
# rustc says nothing. (A `cargo rustc` build with extra arguments after `--` missed most of it
# too.)
slipway_pgo_used() {
  [ -n "${SLIPWAY_PGO_PROFILE:-}" ] && [ "$SLIPWAY_STATIC_TARGET" = x86_64-unknown-linux-gnu ] || return 0
  local sizes text unlikely
  # A section's line: its name, type, address, offset, then its size (hex).
  sizes=$(readelf -SW "$1" | awk '
    { for (i = 1; i < NF; i++) { if ($i == ".text") t = $(i + 4); if ($i == ".text.unlikely") u = $(i + 4) } }
    END { print t "," u }')
  text=${sizes%,*} unlikely=${sizes#*,}
  if [ -z "$unlikely" ] || [ $((0x$unlikely)) -le $((0x${text:-0})) ]; then
    echo "warning: $1 was built without pgo/'s profile: its symbols are not the ones the profile names (another rustc, or release settings other than the training's); just pgo makes it again" >&2
    return 1
  fi
}
if [ -z "${SLIPWAY_COMMIT:-}" ]; then
  SLIPWAY_COMMIT=$(git -C "$root" rev-parse HEAD 2>/dev/null || true)
fi
export SLIPWAY_COMMIT
