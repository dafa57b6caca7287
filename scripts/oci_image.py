#!/usr/bin/env python3
"""Writes slipway's image as an OCI image archive, byte for byte the same for the same inputs.

The archive is an OCI image layout (oci-layout, index.json, blobs/sha256/...) that also carries
Docker's manifest.json, as `docker save` has written since Docker 25, so `docker load`,
`podman load`, `ctr image import` and `kind load image-archive` all accept it. One layer holds the
root filesystem: the static binary at /slipway, the CA bundle, and an /etc/passwd naming the
non-root user the process runs as. Nothing else is in the image.

`--binary ARCH=PATH` given for several platforms writes one image index of them (linux/amd64 and
linux/arm64), each platform with its own layer and config; `docker load` takes the first.

`--rootfs DIR` writes the same files into a directory instead, for the top-level Containerfile,
which copies them into an image FROM scratch: an engine's build gets the files from this code too.

Determinism: every tar entry is owned by 0:0 with the mtime SOURCE_DATE_EPOCH, entries are
sorted, gzip carries no name or time, and JSON is written with sorted keys and no spaces.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
import time

USER = "65534:65534"
PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
)


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def tar_bytes(entries, mtime):
    """entries: (path, mode, bytes or None for a directory), written in path order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path, mode, data in sorted(entries, key=lambda e: e[0]):
            info = tarfile.TarInfo(path)
            info.mode = mode
            info.mtime = mtime
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def gzip_bytes(data):
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write(data)
    return buf.getvalue()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def rfc3339(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def rootfs(binary, ca_bundle):
    """The image's files: (path, mode, bytes or None for a directory)."""
    return [
        ("etc", 0o755, None),
        ("etc/passwd", 0o644, PASSWD.encode()),
        ("etc/ssl", 0o755, None),
        ("etc/ssl/certs", 0o755, None),
        ("etc/ssl/certs/ca-certificates.crt", 0o644, ca_bundle),
        ("slipway", 0o755, binary),
    ]


def write_rootfs(entries, directory):
    """Writes the files into an existing, empty directory, with their modes."""
    for path, mode, data in sorted(entries, key=lambda e: e[0]):
        target = os.path.join(directory, path)
        if data is None:
            os.mkdir(target)
        else:
            with open(target, "wb") as f:
                f.write(data)
        os.chmod(target, mode)


def platform_image(binary, ca_bundle, version, arch, epoch):
    """One platform's image: (blobs as (digest, bytes), config, layer, manifest)."""
    layer_tar = tar_bytes(rootfs(binary, ca_bundle), epoch)
    layer = gzip_bytes(layer_tar)
    created = rfc3339(epoch)
    labels = {
        "org.opencontainers.image.title": "slipway",
        "org.opencontainers.image.description": "Upgrades, reboots and maintains Kubernetes nodes; "
        "a drop-in replacement for system-upgrade-controller",
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.version": version,
    }
    config = canonical(
        {
            "architecture": arch,
            "os": "linux",
            "created": created,
            "config": {
                "User": USER,
                "Entrypoint": ["/slipway"],
                "Cmd": ["run"],
                "WorkingDir": "/",
                "Labels": labels,
            },
            "rootfs": {"type": "layers", "diff_ids": [digest(layer_tar)]},
            "history": [{"created": created, "created_by": "scripts/image.sh"}],
        }
    )
    manifest = canonical(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": digest(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": digest(layer),
                    "size": len(layer),
                }
            ],
            "annotations": {"org.opencontainers.image.created": created},
        }
    )
    return config, layer, manifest


def names(name, version):
    # containerd (ctr, kind, k3s's agent/images) reads the full name, the OCI tools the tag.
    return {
        "io.containerd.image.name": f"{name}:{version}",
        "org.opencontainers.image.ref.name": version,
    }


def blob(data):
    return "blobs/sha256/" + hashlib.sha256(data).hexdigest()


def layout(blobs, index, docker_image, name, version, epoch):
    """The archive: the OCI layout of `index` with `blobs`, and Docker's manifest.json naming
    `docker_image` (config, layer) as `docker load` reads it."""
    config, layer = docker_image
    docker_manifest = canonical(
        [{"Config": blob(config), "RepoTags": [f"{name}:{version}"], "Layers": [blob(layer)]}]
    )
    archive = [("blobs", 0o755, None), ("blobs/sha256", 0o755, None)]
    archive += [(blob(b), 0o644, b) for b in {blob(b): b for b in blobs}.values()]
    archive += [
        ("index.json", 0o644, index),
        ("manifest.json", 0o644, docker_manifest),
        ("oci-layout", 0o644, canonical({"imageLayoutVersion": "1.0.0"})),
    ]
    return tar_bytes(archive, epoch)


def build(binary, ca_bundle, name, version, arch, epoch):
    """Returns (archive bytes, manifest digest)."""
    config, layer, manifest = platform_image(binary, ca_bundle, version, arch, epoch)
    index = canonical(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": digest(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": arch, "os": "linux"},
                    "annotations": names(name, version),
                }
            ],
        }
    )
    archive = layout([layer, config, manifest], index, (config, layer), name, version, epoch)
    return archive, digest(manifest)


def build_index(binaries, ca_bundle, name, version, epoch):
    """A multi-platform image: `binaries` is [(arch, bytes)], the first also what `docker load`
    takes. index.json names one image index (as `docker buildx` writes it), which lists each
    platform's manifest. Returns (archive bytes, index digest)."""
    blobs, platforms, first = [], [], None
    for arch, binary in binaries:
        config, layer, manifest = platform_image(binary, ca_bundle, version, arch, epoch)
        blobs += [layer, config, manifest]
        first = first or (config, layer)
        platforms.append(
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest(manifest),
                "size": len(manifest),
                "platform": {"architecture": arch, "os": "linux"},
            }
        )
    inner = canonical(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": platforms,
        }
    )
    index = canonical(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.index.v1+json",
                    "digest": digest(inner),
                    "size": len(inner),
                    "annotations": names(name, version),
                }
            ],
        }
    )
    return layout(blobs + [inner], index, first, name, version, epoch), digest(inner)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--binary",
        required=True,
        action="append",
        help="the static binary; ARCH=PATH, given once per platform, writes a multi-platform index",
    )
    parser.add_argument("--ca-bundle", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--name", help="with --out: the image's name without its tag (Cargo.toml's "
                        "[package.metadata.slipway] image)")
    parser.add_argument("--arch", default="amd64")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", help="the OCI image archive to write")
    target.add_argument("--rootfs", help="an empty directory to write the image's files into")
    args = parser.parse_args()
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    binaries = []
    for given in args.binary:
        arch, sep, path = given.partition("=")
        if not sep:
            arch, path = args.arch, given
        with open(path, "rb") as f:
            binaries.append((arch, f.read()))
    with open(args.ca_bundle, "rb") as f:
        ca_bundle = f.read()
    if args.rootfs:
        if len(binaries) != 1:
            parser.error("--rootfs takes one --binary")
        write_rootfs(rootfs(binaries[0][1], ca_bundle), args.rootfs)
        print(f"rootfs: {args.rootfs}")
        return
    if not args.name:
        parser.error("--out takes --name")
    if len(binaries) == 1:
        arch, binary = binaries[0]
        archive, manifest_digest = build(binary, ca_bundle, args.name, args.version, arch, epoch)
    else:
        archive, manifest_digest = build_index(binaries, ca_bundle, args.name, args.version, epoch)
        binary = binaries[0][1]
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(archive)
    os.replace(tmp, args.out)
    print(f"image: {args.name}:{args.version} ({len(archive)} bytes, binary {len(binary)} bytes)",
          file=sys.stderr)
    print(f"archive: {args.out}")
    print(f"digest: {manifest_digest}")


if __name__ == "__main__":
    main()
