#!/usr/bin/env bash
# Builds the release archives of the slipway CLI and controller: for each target, a static,
# stripped binary (glibc crt-static, built as scripts/image.sh builds the image's) in
# slipway-<version>-<target>.tar.gz (slipway, LICENSE and README.md at its root, as the krew
# manifest plugins/krew/slipway.yaml takes it), and slipway-<version>.sha256 with the archives' checksums
# (`sha256sum -c` reads it). The archives are reproducible: entries ordered, owned by 0:0, dated
# from the commit, gzip without a name or time.
#
#   scripts/release.sh [OUT]     # default: target/release-archives
#
# SLIPWAY_RELEASE_URL=<base URL of the archives> also writes the krew manifest, filled, as
# OUT/slipway.yaml. SLIPWAY_RELEASE_TARGETS (default "x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu") picks the
# targets. Each target needs rustup's standard library for it (`rustup target add <target>`), and
# one that is not the host a cross C toolchain with glibc's static library, for the linker and
# ring's C code: on Debian, for aarch64, `apt-get install gcc-aarch64-linux-gnu
# libc6-dev-arm64-cross`. With qemu-user-static installed, each foreign binary is run once
# (`--version`) before it is packed. SLIPWAY_RELEASE_PROFILE=dev packs the dev profile's binaries
# (stripped here) instead of a release build: CI checks the archives from its own compile
# (tests/release/check.sh) and ships nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
out=${1:-target/release-archives}
targets=${SLIPWAY_RELEASE_TARGETS:-x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu}
# The release flags of the image (crt-static, paths remapped) and the commit label.
# shellcheck source=scripts/static-env.sh
source "$root/scripts/static-env.sh"
host=$SLIPWAY_STATIC_TARGET
profile=${SLIPWAY_RELEASE_PROFILE:-release}
case "$profile" in
  release | dev) ;;
  *) echo "release: SLIPWAY_RELEASE_PROFILE is release or dev, not $profile" >&2; exit 1 ;;
esac
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
for tool in python3 sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || { echo "release: $tool is required" >&2; exit 1; }
done

# The C toolchain prefix of a target that is not the host.
cross_prefix() {
  case "$1" in
    aarch64-unknown-linux-gnu) echo aarch64-linux-gnu ;;
    x86_64-unknown-linux-gnu) echo x86_64-linux-gnu ;;
    *) echo "release: no cross toolchain known for $1" >&2; return 1 ;;
  esac
}

mkdir -p "$out"
archives=()
for target in $targets; do
  rustup target list --installed 2>/dev/null | grep -qx "$target" || {
    echo "release: no standard library for $target: rustup target add $target" >&2
    exit 1
  }
  env=()
  if [ "$target" != "$host" ]; then
    prefix=$(cross_prefix "$target")
    command -v "$prefix-gcc" >/dev/null 2>&1 || {
      echo "release: $prefix-gcc is missing (Debian: apt-get install gcc-$prefix and its libc6-dev cross package)" >&2
      exit 1
    }
    var=$(echo "$target" | tr 'a-z-' 'A-Z_')
    low=$(echo "$target" | tr '-' '_')
    env=("CARGO_TARGET_${var}_LINKER=$prefix-gcc" "CC_${low}=$prefix-gcc" "AR_${low}=$prefix-ar"
      "RUSTFLAGS=$SLIPWAY_CROSS_RUSTFLAGS")
  fi
  echo "release: building slipway $version for $target ($profile)" >&2
  if [ "$profile" = release ]; then
    env "${env[@]}" cargo build --release --locked --target "$target" --bin slipway
    binary="${CARGO_TARGET_DIR:-target}/$target/release/slipway"
    [ "$target" != "$host" ] || slipway_pgo_used "$binary" || true
  else
    # The host's with all targets, as scripts/ci.sh and image.sh build it (the tests'
    # dev-dependencies turn on features of shared dependencies); a foreign one as scripts/arm64.sh.
    what=(--bin slipway)
    [ "$target" != "$host" ] || what=(--all-targets)
    env "${env[@]}" cargo build --locked --target "$target" "${what[@]}"
    # Stripped as the release profile strips, on a copy: the profile itself stays the tests'.
    binary="${CARGO_TARGET_DIR:-target}/$target/debug/slipway.stripped"
    strip_tool=strip
    [ "$target" = "$host" ] || strip_tool="$(cross_prefix "$target")-strip"
    "$strip_tool" --strip-all -o "$binary" "${CARGO_TARGET_DIR:-target}/$target/debug/slipway"
  fi
  if [ "$target" != "$host" ]; then
    qemu="qemu-${target%%-*}-static"
    if command -v "$qemu" >/dev/null 2>&1; then
      "$qemu" "$binary" --version >&2
    else
      echo "release: $qemu not found: the $target binary is not run before packing" >&2
    fi
  else
    "$binary" --version >&2
  fi
  name="slipway-$version-$target"
  SOURCE_DATE_EPOCH=$epoch python3 - "$binary" "$out/$name.tar.gz" <<'EOF'
import gzip, io, os, sys, tarfile
binary, path = sys.argv[1:3]
epoch = int(os.environ["SOURCE_DATE_EPOCH"])
# At the archive's root, as plugins/krew/slipway.yaml takes them.
entries = [("slipway", 0o755, open(binary, "rb").read()),
           ("LICENSE", 0o644, open("LICENSE", "rb").read()),
           ("README.md", 0o644, open("README.md", "rb").read())]
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
    for p, mode, data in sorted(entries, key=lambda e: e[0]):
        info = tarfile.TarInfo(p)
        info.mode, info.mtime, info.uid, info.gid = mode, epoch, 0, 0
        info.uname = info.gname = "root"
        if data is None:
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        else:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
with open(path + ".tmp", "wb") as f:
    # gzip's default level: 9 took three times as long for 1% less.
    with gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=6, mtime=0) as gz:
        gz.write(buf.getvalue())
os.replace(path + ".tmp", path)
EOF
  archives+=("$name.tar.gz")
done
(cd "$out" && sha256sum "${archives[@]}" > "slipway-$version.sha256")
echo "release: $out/slipway-$version.sha256" >&2
cat "$out/slipway-$version.sha256"

# The krew manifest, filled from the archives, when their base URL is known.
if [ -n "${SLIPWAY_RELEASE_URL:-}" ]; then
  manifest="$out/slipway.yaml"
  cp plugins/krew/slipway.yaml "$manifest"
  for target in $targets; do
    case "$target" in
      x86_64-unknown-linux-gnu) key=LINUX_AMD64 ;;
      aarch64-unknown-linux-gnu) key=LINUX_ARM64 ;;
      *) continue ;;
    esac
    name="slipway-$version-$target.tar.gz"
    sum=$(cd "$out" && sha256sum "$name" | cut -d' ' -f1)
    sed -i -e "s|@URI_${key}@|${SLIPWAY_RELEASE_URL%/}/$name|" -e "s|@SHA256_${key}@|$sum|" "$manifest"
  done
  if grep -q '"@' "$manifest"; then
    echo "release: $manifest keeps placeholders of targets not built" >&2
  fi
  echo "release: $manifest" >&2
fi
