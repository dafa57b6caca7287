#!/usr/bin/env bash
# The top-level Containerfile built by a real engine (buildah, Debian's package), compared with the
# image scripts/image.sh wrote (`./dev image`; CI's image phase): the same files (path, type, mode,
# owner, size, content), the same config (user, entrypoint, command, working directory, labels,
# ports, environment) and platform. Only the files' times and so the digests may differ.
#
# No registry is reachable here, so the engine is not asked to run the build stage (its base image
# is docker.io's Rust image): the stage's output is given to it as the build context `build`
# (`buildah build --build-context build=DIR`, which takes the place of the stage), made by the
# build stage's own command (`oci_image.py --rootfs`) from the binary in image.sh's archive. What
# this checks is everything after the compile: the rootfs command and the final stage, as an engine
# builds them.
#
#   tests/containerfile/engine.sh [IMAGE_ARCHIVE]   (default: target/image/slipway-<version>.oci.tar)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
archive=${1:-target/image/slipway-$version.oci.tar}
[ -f "$archive" ] || { echo "containerfile: $archive is missing (./dev image writes it)" >&2; exit 1; }
command -v buildah >/dev/null || { echo "containerfile: buildah is missing (Debian: apt-get install buildah)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/slipway-containerfile.XXXXXX")
# buildah's vfs store is owned by root and holds read-only copies: removed through buildah first.
store=(--root "$work/storage" --runroot "$work/run" --storage-driver vfs)
cleanup() {
  buildah "${store[@]}" rmi --all --force >/dev/null 2>&1 || true
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The binary of image.sh's image, and the build stage's command over it.
python3 - "$archive" "$work/slipway" <<'PY'
import io, json, sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    blob = lambda d: t.extractfile("blobs/sha256/" + d.split(":")[1]).read()
    index = json.loads(t.extractfile("index.json").read())
    manifest = json.loads(blob(index["manifests"][0]["digest"]))
    if "manifests" in manifest:  # an index of platforms: the first
        manifest = json.loads(blob(manifest["manifests"][0]["digest"]))
    layer = tarfile.open(fileobj=io.BytesIO(blob(manifest["layers"][0]["digest"])))
    open(sys.argv[2], "wb").write(layer.extractfile("slipway").read())
PY
chmod 0755 "$work/slipway"
mkdir -p "$work/stage/rootfs" "$work/context"
python3 scripts/oci_image.py --binary "$work/slipway" --ca-bundle /etc/ssl/certs/ca-certificates.crt \
  --version unused --rootfs "$work/stage/rootfs" >/dev/null

# The context is empty: the final stage copies only from the build stage.
buildah "${store[@]}" build --isolation chroot --pull=never --build-context "build=$work/stage" \
  -f Containerfile -t localhost/slipway-containerfile:"$version" "$work/context" >"$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; exit 1; }
buildah "${store[@]}" push --quiet localhost/slipway-containerfile:"$version" "oci-archive:$work/engine.oci.tar"

python3 - "$archive" "$work/engine.oci.tar" <<'PY'
import hashlib, io, json, sys, tarfile

def image(path):
    with tarfile.open(path) as t:
        blob = lambda d: t.extractfile("blobs/sha256/" + d.split(":")[1]).read()
        index = json.loads(t.extractfile("index.json").read())
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        if "manifests" in manifest:
            manifest = json.loads(blob(manifest["manifests"][0]["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        files = {}
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=io.BytesIO(blob(layer["digest"]))) as l:
                for m in l.getmembers():
                    name = m.name.lstrip("./").rstrip("/")
                    if not name:
                        continue
                    content = l.extractfile(m).read() if m.isfile() else b""
                    files[name] = {
                        # Go's tar writer keeps the file type bits in the mode; Python's does not.
                        "type": m.type.decode(), "mode": oct(m.mode & 0o7777), "uid": m.uid, "gid": m.gid,
                        "size": len(content), "sha256": hashlib.sha256(content).hexdigest(),
                        "link": m.linkname,
                    }
    keys = ["User", "Entrypoint", "Cmd", "WorkingDir", "Labels", "ExposedPorts", "Env", "Volumes", "StopSignal"]
    cfg = dict(config.get("config", {}))
    # What an engine adds on its own: its name and version as a label, and to a FROM scratch
    # image the default PATH (BuildKit does too). The entrypoint's path is absolute.
    cfg["Labels"] = {k: v for k, v in (cfg.get("Labels") or {}).items() if not k.startswith("io.buildah.")}
    if cfg.get("Env") == ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]:
        cfg["Env"] = None
    return {
        "platform": [config.get("os"), config.get("architecture"), config.get("variant")],
        "config": {k: cfg.get(k) or None for k in keys},
        "files": files,
    }

ours, engine = image(sys.argv[1]), image(sys.argv[2])
diffs = []
for part in ["platform", "config"]:
    if ours[part] != engine[part]:
        diffs.append(f"{part}:\n  ./dev image: {json.dumps(ours[part])}\n  engine:      {json.dumps(engine[part])}")
for name in sorted(set(ours["files"]) | set(engine["files"])):
    a, b = ours["files"].get(name), engine["files"].get(name)
    if a != b:
        diffs.append(f"/{name}:\n  ./dev image: {a}\n  engine:      {b}")
if diffs:
    print("containerfile: the engine's image differs from ./dev image's:\n" + "\n".join(diffs), file=sys.stderr)
    sys.exit(1)
print(f"containerfile: buildah's image of the Containerfile equals ./dev image's: "
      f"{len(ours['files'])} files, config {json.dumps(ours['config'], sort_keys=True)}")
PY
