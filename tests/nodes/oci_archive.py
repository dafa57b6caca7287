#!/usr/bin/env python3
"""Writes a container image as an OCI image archive without a container engine or a base image.

The same approach as scripts/oci_image.py (which writes slipway's own image), generalized for the
test nodes' images: one layer made of the files named on the command line, any number of tags, an
entrypoint, a command and environment. The archive is an OCI image layout that also carries
Docker's manifest.json, so `ctr -n k8s.io images import` (the guests' containerd), `docker load` and
`podman load` accept it. Every tar entry is owned by 0:0 with mtime SOURCE_DATE_EPOCH (default 0),
entries are sorted, JSON keys are sorted: the same inputs give the same bytes.

  oci_archive.py --out ARCHIVE --tag busybox:1.37 [--tag ...] \\
      [--file SRC:DEST[:MODE]]... [--busybox SRC] [--dir DEST]... [--symlink DEST:TARGET]... \\
      [--entrypoint JSON] [--cmd JSON] [--env K=V]... [--workdir DIR] [--gzip]

--busybox SRC installs a static busybox as /bin/busybox with a symlink for each of its applets
(listed by running SRC --list-full). Layers are uncompressed unless --gzip: the guests import them
locally, and compressing ~100 MB of kubelets costs more time than it saves.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def full_name(tag):
    """The fully qualified reference containerd's CRI looks up: busybox:1.37 ->
    docker.io/library/busybox:1.37, rancher/kubectl:v1 -> docker.io/rancher/kubectl:v1."""
    name = tag
    first = name.split("/", 1)[0]
    if "/" not in name or ("." not in first and ":" not in first and first != "localhost"):
        if "/" not in name:
            name = "library/" + name
        name = "docker.io/" + name
    return name


def tar_bytes(entries, mtime):
    """entries: {path: (kind, mode, payload)} with kind file (bytes), dir (None) or symlink
    (target); written in path order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path in sorted(entries):
            kind, mode, payload = entries[path]
            info = tarfile.TarInfo(path)
            info.mode = mode
            info.mtime = mtime
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = payload
                tar.addfile(info)
            else:
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def add_parents(entries, path):
    parts = path.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        entries.setdefault(d, ("dir", 0o755, None))


def rootfs(args):
    entries = {}

    def put(path, value):
        path = path.strip("/")
        if not path:
            raise SystemExit(f"oci_archive: bad path {path!r}")
        add_parents(entries, path)
        entries[path] = value

    for d in args.dir:
        put(d, ("dir", 0o755, None))
    for spec in args.file:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            raise SystemExit(f"oci_archive: --file wants SRC:DEST[:MODE], got {spec!r}")
        src, dest = parts[0], parts[1]
        with open(src, "rb") as f:
            data = f.read()
        mode = int(parts[2], 8) if len(parts) == 3 else (0o755 if os.access(src, os.X_OK) else 0o644)
        put(dest, ("file", mode, data))
    if args.busybox:
        with open(args.busybox, "rb") as f:
            put("bin/busybox", ("file", 0o755, f.read()))
        applets = subprocess.run(
            [args.busybox, "--list-full"], check=True, capture_output=True, text=True
        ).stdout.split()
        for applet in applets:
            if applet.strip("/") in entries or applet == "bin/busybox":
                continue
            put(applet, ("symlink", 0o777, "/bin/busybox"))
    for spec in args.symlink:
        dest, _, target = spec.partition(":")
        put(dest, ("symlink", 0o777, target))
    # Files the kubelet and container tools expect in any image.
    for d in ("tmp", "proc", "sys", "dev", "etc", "root", "var", "run"):
        entries.setdefault(d, ("dir", 0o1777 if d == "tmp" else 0o755, None))
    entries.setdefault("etc/passwd", ("file", 0o644, b"root:x:0:0:root:/root:/bin/sh\n"
                                      b"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
    entries.setdefault("etc/group", ("file", 0o644, b"root:x:0:\nnogroup:x:65534:\n"))
    return entries


def build(args, epoch):
    layer_tar = tar_bytes(rootfs(args), epoch)
    if args.gzip:
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=6, mtime=0) as gz:
            gz.write(layer_tar)
        layer, layer_type = buf.getvalue(), "application/vnd.oci.image.layer.v1.tar+gzip"
    else:
        layer, layer_type = layer_tar, "application/vnd.oci.image.layer.v1.tar"
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    cfg = {"WorkingDir": args.workdir, "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + args.env}
    if args.entrypoint:
        cfg["Entrypoint"] = json.loads(args.entrypoint)
    if args.cmd:
        cfg["Cmd"] = json.loads(args.cmd)
    config = canonical({
        "architecture": args.arch,
        "os": "linux",
        "created": created,
        "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": [digest(layer_tar)]},
        "history": [{"created": created, "created_by": "tests/nodes/oci_archive.py"}],
    })
    manifest = canonical({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": digest(config), "size": len(config)},
        "layers": [{"mediaType": layer_type, "digest": digest(layer), "size": len(layer)}],
    })
    index = canonical({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest(manifest),
                "size": len(manifest),
                "platform": {"architecture": args.arch, "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": full_name(tag),
                    "org.opencontainers.image.ref.name": tag.rsplit(":", 1)[-1],
                },
            }
            for tag in args.tag
        ],
    })

    def blob(data):
        return "blobs/sha256/" + hashlib.sha256(data).hexdigest()

    docker_manifest = canonical([{"Config": blob(config), "RepoTags": args.tag, "Layers": [blob(layer)]}])
    archive = {
        "blobs": ("dir", 0o755, None),
        "blobs/sha256": ("dir", 0o755, None),
        blob(layer): ("file", 0o644, layer),
        blob(config): ("file", 0o644, config),
        blob(manifest): ("file", 0o644, manifest),
        "index.json": ("file", 0o644, index),
        "manifest.json": ("file", 0o644, docker_manifest),
        "oci-layout": ("file", 0o644, canonical({"imageLayoutVersion": "1.0.0"})),
    }
    return tar_bytes(archive, epoch), digest(manifest)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--tag", action="append", required=True)
    p.add_argument("--file", action="append", default=[])
    p.add_argument("--dir", action="append", default=[])
    p.add_argument("--symlink", action="append", default=[])
    p.add_argument("--busybox")
    p.add_argument("--entrypoint")
    p.add_argument("--cmd")
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--workdir", default="/")
    p.add_argument("--arch", default="amd64")
    p.add_argument("--gzip", action="store_true")
    args = p.parse_args()
    for tag in args.tag:
        if ":" not in tag.rsplit("/", 1)[-1] or tag.endswith(":latest"):
            raise SystemExit(f"oci_archive: {tag!r} needs a tag other than latest, so that the "
                             "kubelet's default pull policy (IfNotPresent) never pulls it")
    archive, manifest_digest = build(args, int(os.environ.get("SOURCE_DATE_EPOCH", "0")))
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(archive)
    os.replace(tmp, args.out)
    print(f"oci_archive: {' '.join(args.tag)}: {args.out} ({len(archive)} bytes, {manifest_digest})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
