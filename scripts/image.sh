#!/usr/bin/env bash
# Builds slipway's container image without a container engine or a base image: a static, stripped
# binary (glibc crt-static), CA certificates and an /etc/passwd naming the non-root user, written as
# an OCI image archive that docker/podman load, ctr image import and kind load image-archive accept.
# Prints the archive's path and the image's manifest digest last. The same commit gives the same
# digest: paths are remapped, timestamps come from the commit (SOURCE_DATE_EPOCH), tar entries are
# ordered and owned by 0:0.
#
#   scripts/image.sh [OUT]          # default: target/image/slipway-<version>.oci.tar
#
# SLIPWAY_IMAGE_PROFILE=dev takes the binary of the dev profile instead of the release one (stripped
# here): CI builds its image from the same compile as its tests (scripts/ci.sh), and ships nothing.
# SLIPWAY_IMAGE_PLATFORMS="amd64 arm64" writes one multi-platform image (an image index) with the
# other platform's binary cross-compiled (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross on Debian).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
# The published name (Cargo.toml's [package.metadata.slipway]), which the manifests run.
# shellcheck source=scripts/names.sh
source "$root/scripts/names.sh"
out=${1:-target/image/slipway-$version.oci.tar}
# shellcheck source=scripts/static-env.sh
source "$root/scripts/static-env.sh"
host=$SLIPWAY_STATIC_TARGET
profile=${SLIPWAY_IMAGE_PROFILE:-release}
case "$profile" in
  release | dev) ;;
  *) echo "image: SLIPWAY_IMAGE_PROFILE is release or dev, not $profile" >&2; exit 1 ;;
esac
case "$host" in
  x86_64-unknown-linux-gnu) arch=amd64 ;;
  aarch64-unknown-linux-gnu) arch=arm64 ;;
  *) echo "image: static glibc builds are set up for x86_64/aarch64 Linux hosts, not $host" >&2; exit 1 ;;
esac
for tool in python3 cc; do
  command -v "$tool" >/dev/null 2>&1 || { echo "image: $tool is required (apt-get install python3 gcc)" >&2; exit 1; }
done
libc_a=$(cc -print-file-name=libc.a)
[ -f "$libc_a" ] || { echo "image: glibc's static library is missing (apt-get install libc6-dev)" >&2; exit 1; }
certs=${SLIPWAY_IMAGE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
[ -f "$certs" ] || { echo "image: no CA bundle at $certs (apt-get install ca-certificates)" >&2; exit 1; }

# The archive's timestamps: the commit's time. Given to the archive writer only: C build scripts
# (ring's) rebuild whenever it changes, and the binary does not need it.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
echo "image: building the static slipway binary for $host ($profile; the first build takes minutes)" >&2
if [ "$profile" = release ]; then
  cargo build --release --locked --target "$host" --bin slipway
  binary="${CARGO_TARGET_DIR:-target}/$host/release/slipway"
  slipway_pgo_used "$binary" || true
else
  # All targets, as scripts/ci.sh builds them: the tests' dev-dependencies turn on features of
  # shared dependencies, so a build of the binary alone would compile them again.
  cargo build --locked --target "$host" --all-targets
  # Stripped as the release profile strips, on a copy: the profile itself stays the tests'.
  binary="${CARGO_TARGET_DIR:-target}/$host/debug/slipway.stripped"
  strip --strip-all -o "$binary" "${CARGO_TARGET_DIR:-target}/$host/debug/slipway"
fi

binaries=(--binary "$arch=$binary")
# Other platforms: the same build for each, cross-compiled (as scripts/arm64.sh and release.sh).
for platform in ${SLIPWAY_IMAGE_PLATFORMS:-}; do
  [ "$platform" != "$arch" ] || continue
  case "$platform" in
    arm64) cross=aarch64-unknown-linux-gnu prefix=aarch64-linux-gnu ;;
    amd64) cross=x86_64-unknown-linux-gnu prefix=x86_64-linux-gnu ;;
    *) echo "image: no platform $platform (amd64, arm64)" >&2; exit 1 ;;
  esac
  command -v "$prefix-gcc" >/dev/null 2>&1 || { echo "image: $prefix-gcc is missing (Debian: gcc-$prefix and its libc6-dev cross package)" >&2; exit 1; }
  rustup target list --installed | grep -qx "$cross" || rustup target add "$cross" >&2
  var=$(echo "$cross" | tr 'a-z-' 'A-Z_')
  low=$(echo "$cross" | tr '-' '_')
  cross_env=("CARGO_TARGET_${var}_LINKER=$prefix-gcc" "CC_${low}=$prefix-gcc" "AR_${low}=$prefix-ar"
    "RUSTFLAGS=$SLIPWAY_CROSS_RUSTFLAGS")
  echo "image: building the static slipway binary for $cross ($profile)" >&2
  if [ "$profile" = release ]; then
    env "${cross_env[@]}" cargo build --release --locked --target "$cross" --bin slipway
    other="${CARGO_TARGET_DIR:-target}/$cross/release/slipway"
  else
    env "${cross_env[@]}" cargo build --locked --target "$cross" --bin slipway
    other="${CARGO_TARGET_DIR:-target}/$cross/debug/slipway.stripped"
    "$prefix-strip" --strip-all -o "$other" "${CARGO_TARGET_DIR:-target}/$cross/debug/slipway"
  fi
  binaries+=(--binary "$platform=$other")
done

mkdir -p "$(dirname "$out")"
SOURCE_DATE_EPOCH=$epoch python3 scripts/oci_image.py "${binaries[@]}" --ca-bundle "$certs" --name "$slipway_image" --version "$version" \
  --out "$out"
