#!/usr/bin/env bash
# A release cut from CI's dev compile (the shipped one differs only in its profile) by the release
# script itself, scripts/cut-release.sh, and published to an OCI registry on loopback
# (distribution's), then checked: the release files (the CLI's archives for linux/amd64 and
# linux/arm64 with their checksums and the filled krew manifest, the install manifest, the CRDs,
# the notes), each archive unpacked as krew unpacks it and its binary run (the arm64 one under
# qemu-user: `--version` and `validate` of the quick start's Plan), the archives made again the
# same, the two-platform image read by go-containerregistry's validators (tests/tools/ocicheck)
# and read back from the registry with the chart; and the release builds' profile (pgo/) read by
# this rustc. CI's phase `release`, after scripts/arm64.sh (whose cross compile it reuses).
#
#   tests/release/check.sh [OUT]     # default: target/ci/release
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${1:-target/ci/release}
# shellcheck source=scripts/names.sh
source "$root/scripts/names.sh"
version=$slipway_version home=$slipway_home published=$slipway_image chart=$slipway_chart
url="$home/releases/download/v$version"
fail() { echo "release check: $*" >&2; exit 1; }
# The static build's dev-profile flags (scripts/static-env.sh), as CI's compile has them.
export SLIPWAY_IMAGE_PROFILE=dev SLIPWAY_RELEASE_PROFILE=dev

rm -rf "$out"
mkdir -p "$out"
registry_tools=$(tests/tools/registry/build.sh)
helm=$(tests/tools/helm/build.sh)
cosign=$(tests/tools/cosign/build.sh)
export CARGO_CYCLONEDX
CARGO_CYCLONEDX=$(tests/tools/cyclonedx/build.sh)
port=$(tests/tools/registry/up.sh "$out/registry")
trap 'kill "$(cat "$out/registry/pids/registry.pid")" 2>/dev/null || true' EXIT
export CRANE=$registry_tools/crane HELM=$helm COSIGN=$cosign
# The release signed with a key of the check's own (the workflow signs keyless, with its OIDC
# identity, which only GitHub gives).
mkdir -p "$out/keys"
COSIGN_PASSWORD="" "$cosign" generate-key-pair --output-key-prefix "$out/keys/release" >/dev/null 2>&1 ||
  fail "cosign generate-key-pair failed"
COSIGN_PASSWORD="" "$cosign" generate-key-pair --output-key-prefix "$out/keys/other" >/dev/null 2>&1 ||
  fail "cosign generate-key-pair failed"
export COSIGN_PASSWORD=""
# verify REF [KEY] : cosign verify as installation.md has a mirror's image checked.
verify() {
  "$cosign" verify --key "${2:-$out/keys/release.pub}" --insecure-ignore-tlog=true --allow-http-registry "$1" \
    >/dev/null 2>"$out/verify.err"
}

# A tag that is not the version's cuts nothing.
! scripts/cut-release.sh v0.0.0-not-this "$out/wrong" 2>"$out/wrong.err" ||
  fail "cut-release.sh took the tag v0.0.0-not-this"
grep -q "is not v$version" "$out/wrong.err" || fail "cut-release.sh refused a wrong tag saying: $(cat "$out/wrong.err")"
# Nor does a release to the published names that nothing signs.
! env -u COSIGN_KEY -u SLIPWAY_SIGN -u SLIPWAY_RELEASE_REGISTRY scripts/cut-release.sh "v$version" "$out/unsigned" \
  2>"$out/unsigned.err" || fail "cut-release.sh cut a release to $published that nothing signs"
grep -q "is signed: set SLIPWAY_SIGN=keyless" "$out/unsigned.err" ||
  fail "cut-release.sh refused an unsigned release saying: $(cat "$out/unsigned.err")"
[ ! -e "$out/unsigned" ] || fail "cut-release.sh built an unsigned release before refusing it"

digest=$(COSIGN_KEY="$out/keys/release.key" SLIPWAY_RELEASE_REGISTRY="127.0.0.1:$port" \
  scripts/cut-release.sh "v$version" "$out/cut" | tail -n 1)
files="$out/cut/files"
(cd "$files" && sha256sum --check --strict --quiet "slipway-$version.sha256") ||
  fail "the checksums do not match the archives"
manifest="$files/krew-slipway.yaml"
! grep -q '"@' "$manifest" || fail "$manifest keeps placeholders: $(grep '"@' "$manifest")"
grep -qF "image: $published:$version" "$files/slipway.yaml" ||
  fail "the release's slipway.yaml does not run $published:$version"
for crd in crds/*.yaml; do
  name=$(sed -n 's/^  name: \(.*\)$/\1/p' "$crd" | head -n 1)
  grep -q "^  name: $name\$" "$files/crds.yaml" || fail "crds.yaml lacks $name"
done
[ -s "$out/cut/notes.md" ] || fail "the release notes (CHANGELOG.md's section for $version) are empty"

for target in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu; do
  name="slipway-$version-$target.tar.gz"
  archive="$files/$name"
  grep -q "^[0-9a-f]\{64\}  $name\$" "$files/slipway-$version.sha256" ||
    fail "no checksum for $name"
  # What krew's manifest takes from it, at its root, owned by root.
  listing=$(tar -tvzf "$archive" | awk '{print $1, $2, $6}')
  want=$'-rw-r--r-- root/root LICENSE\n-rw-r--r-- root/root README.md\n-rwxr-xr-x root/root slipway'
  [ "$listing" = "$want" ] || fail "$name holds:"$'\n'"$listing"$'\n'"not:"$'\n'"$want"
  sum=$(sha256sum "$archive" | cut -d' ' -f1)
  grep -A1 -F "uri: \"$url/$name\"" "$manifest" | grep -q "sha256: \"$sum\"" ||
    fail "the krew manifest does not name $name with its sha256 $sum"
  unpacked="$out/unpacked/$target"
  mkdir -p "$unpacked"
  tar -xzf "$archive" -C "$unpacked"
  run=("$unpacked/slipway")
  [ "$target" != aarch64-unknown-linux-gnu ] || run=(qemu-aarch64-static "$unpacked/slipway")
  said=$("${run[@]}" --version)
  [ "$said" = "slipway $version" ] || fail "$name's binary says \"$said\", not \"slipway $version\""
  "${run[@]}" validate examples/quickstart/hello.yaml >/dev/null ||
    fail "$name's binary does not validate the quick start's Plan"
  echo "release check: $name: $(du -h "$archive" | cut -f1), runs" >&2
done
# Two builds of the same commit give the same archives.
scripts/release.sh "$out/again" >/dev/null
cmp "$files/slipway-$version.sha256" "$out/again/slipway-$version.sha256" ||
  fail "a second build gave other archives"

image="$out/cut/slipway-$version.oci.tar"
platforms=$(tar -xOf "$image" index.json | python3 -c '
import json, sys, tarfile
archive = tarfile.open(sys.argv[1])
def blob(digest):
    return json.load(archive.extractfile("blobs/sha256/" + digest.split(":")[1]))
index = blob(json.load(sys.stdin)["manifests"][0]["digest"])
print(" ".join(sorted(m["platform"]["os"] + "/" + m["platform"]["architecture"] for m in index["manifests"])))
' "$image")
[ "$platforms" = "linux/amd64 linux/arm64" ] || fail "the image's index names $platforms"
"$(tests/tools/ocicheck.sh)" "$image" "$published:$version" >&2 ||
  fail "the two-platform image is refused"

# What the release published, read back from the registry: the index whole (both platforms, the
# archive's digest), the chart as Helm installs it from `oci://`.
want=$(tar -xOf "$image" index.json | python3 -c 'import json, sys; print(json.load(sys.stdin)["manifests"][0]["digest"])')
[ "$digest" = "$want" ] || fail "the registry holds $digest, not the archive's index $want"
pushed=$("$registry_tools/crane" manifest "127.0.0.1:$port/${published#*/}:$version" | python3 -c '
import json, sys
print(" ".join(sorted(m["platform"]["os"] + "/" + m["platform"]["architecture"] for m in json.load(sys.stdin)["manifests"])))')
[ "$pushed" = "linux/amd64 linux/arm64" ] || fail "the published index names $pushed"
"$helm" template slipway "oci://127.0.0.1:$port/${chart#oci://*/}" --version "$version" --plain-http \
  >"$out/chart.yaml" 2>"$out/chart.err" || fail "the published chart does not render: $(cat "$out/chart.err")"
grep -qF "image: $published:$version" "$out/chart.yaml" ||
  fail "the published chart does not run $published:$version"
echo "release check: published the image ($digest, linux/amd64 and linux/arm64) and the chart to a registry, read back" >&2
# Signed, both, by the release's key; what is not signed by it fails: the same image copied
# without its signature, and the tag moved to another image signed by another key.
pushed_image="127.0.0.1:$port/${published#*/}:$version"
pushed_chart="127.0.0.1:$port/${chart#oci://*/}:$version"
verify "$pushed_image" || fail "the published image's signature does not verify: $(cat "$out/verify.err")"
verify "$pushed_chart" || fail "the published chart's signature does not verify: $(cat "$out/verify.err")"
# Each platform's SBOM: a release file, and attached to its image as a signed attestation that
# says the same: the binary, at this version, and its dependencies (kube among them).
sbom_says() { # sbom_says FILE : "name version components kube-version" of a CycloneDX SBOM
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
if "predicate" in d:
    d = d["predicate"]
c = d["metadata"]["component"]
kube = [x["version"] for x in d.get("components", []) if x["name"] == "kube"]
print(d["bomFormat"], d["specVersion"], c["name"], c["version"], len(d.get("components", [])) > 100, kube)
' "$1"
}
for target in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu; do
  platform=linux/amd64
  [ "$target" = x86_64-unknown-linux-gnu ] || platform=linux/arm64
  file="$files/slipway-$version-$target.cdx.json"
  [ -s "$file" ] || fail "the release has no SBOM for $target"
  kube=$(sed -n 's/^kube = { version = "\([0-9.]*\)".*/\1/p' Cargo.toml)
  said=$(sbom_says "$file")
  case "$said" in
    "CycloneDX 1.5 slipway $version True ['$kube."*) ;;
    *) fail "the SBOM for $target says: $said" ;;
  esac
  of=$("$registry_tools/crane" digest --platform "$platform" "$pushed_image")
  "$cosign" verify-attestation --type cyclonedx --key "$out/keys/release.pub" --insecure-ignore-tlog=true \
    --allow-http-registry "127.0.0.1:$port/${published#*/}@$of" 2>"$out/verify.err" |
    head -n 1 | python3 -c 'import base64, json, sys; print(base64.b64decode(json.load(sys.stdin)["payload"]).decode())' \
    >"$out/attested-$target.json" || fail "the SBOM attestation of $platform does not verify: $(cat "$out/verify.err")"
  [ "$(sbom_says "$out/attested-$target.json")" = "$said" ] ||
    fail "the attestation of $platform says $(sbom_says "$out/attested-$target.json"), the release file $said"
done
echo "release check: each platform's SBOM is a release file and a signed attestation of its image" >&2
verify "$pushed_image" "$out/keys/other.pub" && fail "the image verifies with a key that did not sign it"
"$registry_tools/crane" copy "$pushed_image" "127.0.0.1:$port/slipway-dev/unsigned:$version" 2>/dev/null ||
  fail "crane could not copy the image"
verify "127.0.0.1:$port/slipway-dev/unsigned:$version" && fail "an unsigned copy of the image verifies"
grep -q "no signatures found" "$out/verify.err" || fail "an unsigned image is refused saying: $(cat "$out/verify.err")"
tampered=$("$registry_tools/crane" mutate "$pushed_image" --label slipway.test/tampered=yes -t "$pushed_image" 2>/dev/null) ||
  fail "crane could not make a tampered image"
"$cosign" sign --yes --tlog-upload=false --allow-http-registry \
  --key "$out/keys/other.key" "$tampered" >/dev/null 2>&1 || fail "cosign could not sign the tampered image"
verify "$pushed_image" && fail "an image re-tagged and signed by another key verifies"
grep -q "no matching signatures" "$out/verify.err" ||
  fail "an image signed by another key is refused saying: $(cat "$out/verify.err")"
echo "release check: the image and the chart are signed; an unsigned copy and a re-tagged image fail cosign verify" >&2
# The release builds' profile (scripts/static-env.sh) is read by this rustc: with a profile that
# is damaged or of a newer LLVM, a release build (CI makes none) would fail or, rustc only
# warning, ship without it. Read as a release build reads it, by a one-line program.
(
  export SLIPWAY_IMAGE_PROFILE=release SLIPWAY_PGO=on
  # shellcheck source=scripts/static-env.sh
  source "$root/scripts/static-env.sh"
  [ -n "${SLIPWAY_PGO_PROFILE:-}" ] || fail "a release build takes no profile (pgo/slipway.profdata.xz)"
  # A damaged profile is only a warning to rustc: any word from it fails the check.
  echo 'fn main() { println!("profiled"); }' |
    rustc --edition 2021 -O -Cprofile-use="$SLIPWAY_PGO_PROFILE" -o "$out/profiled" - 2>"$out/profiled.err" &&
    [ ! -s "$out/profiled.err" ] ||
    fail "rustc does not read the profile of pgo/ cleanly (make it again: just pgo): $(cat "$out/profiled.err")"
  [ "$("$out/profiled")" = profiled ] || fail "the program built with the profile does not run"
  # The link order is the profile's (its names are symbols the profile counted), and rust-lld
  # takes it: a one-line program linked with the release build's flags.
  if [ "$SLIPWAY_STATIC_TARGET" = x86_64-unknown-linux-gnu ]; then
    [ -n "${SLIPWAY_PGO_ORDER:-}" ] || fail "a release build takes no link order (pgo/slipway.order.xz)"
    for n in 1 "$(($(wc -l < "$SLIPWAY_PGO_ORDER") / 2))" "$(wc -l < "$SLIPWAY_PGO_ORDER")"; do
      name=$(sed -n "${n}p" "$SLIPWAY_PGO_ORDER")
      grep -aqF -- "$name" "$SLIPWAY_PGO_PROFILE" ||
        fail "pgo/slipway.order.xz names $name, which the profile does not: make both again (just pgo)"
    done
    echo 'fn main() { println!("ordered"); }' |
      rustc --edition 2021 -O -Clink-arg=-Wl,--symbol-ordering-file="$SLIPWAY_PGO_ORDER" \
        -Clink-arg=-Wl,--no-warn-symbol-ordering \
        -o "$out/profiled" - 2>"$out/profiled.err" && [ ! -s "$out/profiled.err" ] ||
      fail "rust-lld does not take the link order of pgo/: $(cat "$out/profiled.err")"
    [ "$("$out/profiled")" = ordered ] || fail "the program linked in the profile's order does not run"
  fi
  echo "release check: the profile of pgo/ is read by $(rustc --version)" >&2
)

# The checksums and the manifest stay to be read; the large files go (CI's disk is not large).
rm -rf "$out/again" "$out/unpacked" "$image" "$files"/*.tar.gz "$out/profiled" "$out/profiled.err" \
  "$out/registry/registry/storage"
echo "release check: ok ($out)" >&2
