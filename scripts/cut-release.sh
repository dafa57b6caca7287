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
scripts/publish.sh --chart "$out/slipway-$version.oci.tar" ${SLIPWAY_RELEASE_REGISTRY:+"$SLIPWAY_RELEASE_REGISTRY"}
