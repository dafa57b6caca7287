#!/usr/bin/env bash
# The linux/arm64 build of slipway, exercised under emulation: cross-compiles the binary for
# aarch64 (glibc, statically linked, in the profile of the caller's build: CI's dev profile) and
# runs `--version` and `validate` of the quick start's Plan with qemu-user. CI's phase `arm64`.
#
# Needs rustup's standard library for aarch64 (added here once), and from Debian
# gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user-static (./dev installs them).
# Prints the binary's path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=aarch64-unknown-linux-gnu
for tool in aarch64-linux-gnu-gcc qemu-aarch64-static; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "arm64: $tool is missing (Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static)" >&2
    exit 1
  }
done
rustup target list --installed | grep -qx "$target" || rustup target add "$target" >&2
# shellcheck source=scripts/static-env.sh
source "$root/scripts/static-env.sh"
RUSTFLAGS=$SLIPWAY_CROSS_RUSTFLAGS CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
  CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
  AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar \
  cargo build --locked --target "$target" --bin slipway >&2
binary="${CARGO_TARGET_DIR:-target}/$target/debug/slipway"
file_type=$(od -An -tx1 -j18 -N2 "$binary" | tr -d ' ')
[ "$file_type" = b700 ] || { echo "arm64: $binary is not an aarch64 ELF (e_machine $file_type)" >&2; exit 1; }
qemu-aarch64-static "$binary" --version >&2
qemu-aarch64-static "$binary" validate examples/quickstart/hello.yaml >&2
echo "$binary"
