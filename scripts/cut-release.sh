#!/usr/bin/env bash
# A release from its tag, in one script: builds everything a release ships into OUT/files, then
# publishes the image and the chart (scripts/publish.sh). .github/workflows/release.yml runs it on
# a tag; CI runs it on every change from its own dev compile, against a registry on loopback
# (tests/release/check.sh).
#
#   scripts/cut-release.sh TAG [OUT]     # OUT default: target/release/TAG
#
# TAG is v<Cargo.toml's version>, and CHANGELOG.md has a section for that version. OUT/files holds
# what goes on the release page:
#   slipway.yaml                         the install manifest (scripts/release-manifest.sh)
#   crds.yaml                            every CRD, for clusters where the CRDs are applied apart
#   slipway-<version>-<target>.tar.gz    the CLI for linux/amd64 and linux/arm64 (scripts/release.sh)
#   slipway-<version>.sha256             their checksums
#   krew-slipway.yaml                    the krew manifest, filled with the archives' URLs
#   slipway-<version>-<target>.cdx.json  the SBOM of each platform's binary (CycloneDX), also
#                                        attached to its image as a signed attestation
# OUT/notes.md is the version's section of CHANGELOG.md (the release page's text), and
# OUT/slipway-<version>.oci.tar the two-platform image that is pushed.
#
# SLIPWAY_RELEASE_REGISTRY publishes to another registry (scripts/publish.sh's REGISTRY); the
# image and the chart are signed as publish.sh signs (COSIGN_KEY, or SLIPWAY_SIGN=keyless);
# SLIPWAY_RELEASE_PROFILE=dev builds from the dev profile (CI: nothing it builds is shipped).
# The archives' URLs are the project's release downloads (Cargo.toml's repository).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 TAG [OUT]" >&2; exit 2; }
tag=$1
out=${2:-target/release/$tag}
# shellcheck source=scripts/names.sh
source "$root/scripts/names.sh"
version=$slipway_version home=$slipway_home
[ "$tag" = "v$version" ] || { echo "cut-release: the tag $tag is not v$version (Cargo.toml)" >&2; exit 1; }
notes=$(awk -v v="$version" '
  /^## / { keep = (index($0, "## " v " ") == 1 || $0 == "## " v) ; if (keep) { found = 1; next } }
  keep { print }
  END { if (!found) exit 1 }' CHANGELOG.md) ||
  { echo "cut-release: CHANGELOG.md has no section \"## $version\"" >&2; exit 1; }

# What goes to the published names is signed: refused before anything is built.
if [ -z "${SLIPWAY_RELEASE_REGISTRY:-}" ] && [ -z "${COSIGN_KEY:-}" ] && [ -z "${SLIPWAY_SIGN:-}" ]; then
  echo "cut-release: a release to $slipway_image is signed: set SLIPWAY_SIGN=keyless (the workflow) or COSIGN_KEY" >&2
  exit 1
fi

rm -rf "$out"
mkdir -p "$out/files"
files=$out/files
start=$SECONDS
SLIPWAY_RELEASE_URL="$home/releases/download/$tag" scripts/release.sh "$out/archives" >/dev/null
mv "$out/archives"/*.tar.gz "$out/archives/slipway-$version.sha256" "$files/"
mv "$out/archives/slipway.yaml" "$files/krew-slipway.yaml"
rmdir "$out/archives"
# The SBOMs: each platform's binary and its dependencies from Cargo.lock (CycloneDX 1.5, by
# cargo-cyclonedx: CARGO_CYCLONEDX, or on PATH; tests/tools/cyclonedx/build.sh installs it), dated
# by the commit.
cyclonedx=${CARGO_CYCLONEDX:-$(command -v cargo-cyclonedx || true)}
[ -x "$cyclonedx" ] || { echo "cut-release: cargo-cyclonedx is missing (tests/tools/cyclonedx/build.sh installs it; set CARGO_CYCLONEDX)" >&2; exit 1; }
epoch=$(git log -1 --format=%ct 2>/dev/null || date +%s)
sboms=()
for target in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu; do
  # It writes one file per binary beside each package's Cargo.toml: slipway's is kept, the fuzz
  # targets' go.
  SOURCE_DATE_EPOCH=$epoch "$cyclonedx" cyclonedx --manifest-path Cargo.toml --format json \
    --describe binaries --target "$target" --spec-version 1.5 --quiet
  mv slipway_bin.cdx.json "$files/slipway-$version-$target.cdx.json"
  rm -f fuzz/*_bin.cdx.json
  case "$target" in
    x86_64-*) sboms+=(--sbom "linux/amd64=$files/slipway-$version-$target.cdx.json") ;;
    aarch64-*) sboms+=(--sbom "linux/arm64=$files/slipway-$version-$target.cdx.json") ;;
  esac
done
scripts/release-manifest.sh >"$files/slipway.yaml"
for crd in crds/*.yaml; do
  echo "---"
  cat "$crd"
done >"$files/crds.yaml"
printf '%s\n' "$notes" >"$out/notes.md"
# The image's profile follows the archives' (scripts/image.sh reads SLIPWAY_IMAGE_PROFILE).
SLIPWAY_IMAGE_PROFILE=${SLIPWAY_RELEASE_PROFILE:-release} SLIPWAY_IMAGE_PLATFORMS="amd64 arm64" \
  scripts/image.sh "$out/slipway-$version.oci.tar" >/dev/null
echo "cut-release: built $tag in $((SECONDS - start))s" >&2
scripts/publish.sh --chart "${sboms[@]}" "$out/slipway-$version.oci.tar" ${SLIPWAY_RELEASE_REGISTRY:+"$SLIPWAY_RELEASE_REGISTRY"}
