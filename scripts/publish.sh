#!/usr/bin/env bash
# Publishes a release: pushes slipway's image archive (scripts/image.sh; for a release the
# two-platform one, SLIPWAY_IMAGE_PLATFORMS="amd64 arm64") under its published name, and with
# --chart the Helm chart as an OCI artefact beside it. Prints the image's digest last.
#
#   scripts/publish.sh [--chart] [--sbom PLATFORM=FILE]... ARCHIVE [REGISTRY]
#
# The names are Cargo.toml's ([package.metadata.slipway] image and chart), tagged with its version.
# REGISTRY (e.g. 127.0.0.1:5000, a mirror or a test registry) replaces the names' registry, the
# path kept: ghcr.io/slipway-dev/slipway:0.1.0 goes to REGISTRY/slipway-dev/slipway:0.1.0, which a
# mirror of ghcr.io serves under the published name. A registry on loopback is spoken to in plain
# HTTP. Needs `crane` (go-containerregistry), and `helm` for --chart: on PATH, or CRANE and HELM;
# tests/tools/registry/build.sh and tests/tools/helm/build.sh build them. Credentials are the
# tools' own (`crane auth login`, `helm registry login`).
#
# Signatures (cosign, by the digest pushed, stored beside it in the registry as cosign stores them):
#   COSIGN_KEY=FILE        signs with that key (its password in COSIGN_PASSWORD), without a
#                          transparency-log entry: for a mirror of one's own, an air-gapped
#                          registry, the tests. Verify with `cosign verify --key cosign.pub
#                          --insecure-ignore-tlog=true REF`.
#   SLIPWAY_SIGN=keyless   signs with the CI's OIDC identity, logged in Sigstore's public
#                          transparency log (the release workflow).
#   neither                nothing is signed, and it says so.
# --sbom linux/amd64=FILE attaches FILE, a CycloneDX SBOM, to that platform's image as a signed
# attestation (`cosign attest --type cyclonedx`; `cosign verify-attestation` reads it back);
# without a signature nothing is attached.
# cosign: on PATH, or COSIGN; tests/tools/cosign/build.sh builds it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
chart=false sboms=()
while [ $# -gt 0 ]; do
  case "$1" in
    --chart) chart=true ;;
    --sbom) sboms+=("${2:?--sbom takes PLATFORM=FILE}"); shift ;;
    *) break ;;
  esac
  shift
done
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 [--chart] [--sbom PLATFORM=FILE]... ARCHIVE [REGISTRY]" >&2; exit 2; }
for sbom in ${sboms[@]+"${sboms[@]}"}; do
  [ -f "${sbom#*=}" ] || { echo "publish: no SBOM ${sbom#*=} (--sbom $sbom)" >&2; exit 1; }
done
archive=$1 registry=${2:-}
[ -f "$archive" ] || { echo "publish: no image archive $archive" >&2; exit 1; }
crane=${CRANE:-$(command -v crane || true)}
[ -x "$crane" ] || { echo "publish: crane is missing (tests/tools/registry/build.sh builds it; set CRANE)" >&2; exit 1; }

# shellcheck source=scripts/names.sh
source "$root/scripts/names.sh"
version=$slipway_version image=$slipway_image chart_ref=$slipway_chart
if [ -n "$registry" ]; then
  image="$registry/${image#*/}"
  chart_ref="oci://$registry/${chart_ref#oci://*/}"
fi
plain=() insecure=()
case "$image" in
  localhost:* | 127.0.0.1:* | localhost/* | 127.0.0.1/*) plain=(--plain-http) insecure=(--allow-http-registry) ;;
esac
sign=() signing=true
if [ -n "${COSIGN_KEY:-}" ]; then
  sign=(--key "$COSIGN_KEY" --tlog-upload=false)
elif [ -z "${SLIPWAY_SIGN:-}" ]; then
  signing=false
elif [ "$SLIPWAY_SIGN" != keyless ]; then
  echo "publish: SLIPWAY_SIGN is \"$SLIPWAY_SIGN\"; it takes only \"keyless\" (COSIGN_KEY signs with a key)" >&2
  exit 2
fi
if [ "$signing" = true ]; then
  cosign=${COSIGN:-$(command -v cosign || true)}
  [ -x "$cosign" ] || { echo "publish: cosign is missing (tests/tools/cosign/build.sh builds it; set COSIGN)" >&2; exit 1; }
fi
# signed REF@DIGEST : signs what was pushed, by digest (a tag can be moved; a digest cannot).
signed() {
  if [ "$signing" = true ]; then
    "$cosign" sign --yes "${insecure[@]}" "${sign[@]}" "$1" >&2
    echo "publish: signed $1" >&2
  else
    echo "publish: $1 is not signed (COSIGN_KEY or SLIPWAY_SIGN=keyless signs it)" >&2
  fi
}

# crane pushes an OCI layout directory: the archive unpacked. Its one entry (an image, or an
# index of one image per platform) is pushed whole under the tag.
layout=$(mktemp -d)
trap 'rm -rf "$layout"' EXIT
tar -xf "$archive" -C "$layout"
start=$SECONDS
"$crane" push "$layout" "$image:$version" >&2
digest=$("$crane" digest "$image:$version")
echo "publish: $image:$version is $digest ($((SECONDS - start))s)" >&2
signed "$image@$digest"
for sbom in ${sboms[@]+"${sboms[@]}"}; do
  platform=${sbom%%=*} file=${sbom#*=}
  if [ "$signing" = false ]; then
    echo "publish: the SBOM of $platform is not attached (only as a signed attestation)" >&2
    continue
  fi
  of=$("$crane" digest --platform "$platform" "$image:$version")
  "$cosign" attest --yes --type cyclonedx --predicate "$file" "${insecure[@]}" "${sign[@]}" "$image@$of" >&2
  echo "publish: attested the SBOM of $platform ($image@$of)" >&2
done

if [ "$chart" = true ]; then
  helm=${HELM:-$(command -v helm || true)}
  [ -x "$helm" ] || { echo "publish: helm is missing (tests/tools/helm/build.sh builds it; set HELM)" >&2; exit 1; }
  "$helm" package charts/slipway --destination "$layout" >&2
  # helm push takes the repository the chart's name goes under.
  "$helm" push "${plain[@]}" "$layout/slipway-$version.tgz" "${chart_ref%/slipway}" >&2
  chart_digest=$("$crane" digest "${chart_ref#oci://}:$version")
  echo "publish: the chart is $chart_ref:$version ($chart_digest)" >&2
  signed "${chart_ref#oci://}@$chart_digest"
fi
echo "$digest"
