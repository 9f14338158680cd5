#!/usr/bin/env python3
"""Pack a root filesystem into one image tarball, reproducibly, with the standard library only.

The output is at the same time a `docker save` archive (manifest.json) and an OCI image layout
(oci-layout, index.json, blobs/sha256/), so `docker load`, `crossplane xpkg build
--embed-runtime-image-tarball`, skopeo (docker-archive: and oci-archive:) and go-containerregistry
all read it. The bytes depend only on the files, their modes and owners, SOURCE_DATE_EPOCH and the
options:

- entries are written in byte order of their paths, depth first, never following a symlink;
- every mtime is clamped to SOURCE_DATE_EPOCH (the base layer's, optionally, to an earlier
  --base-epoch), user and group names are dropped (ids are kept);
- layers are PAX tars, gzip-compressed with a zero gzip mtime and no file name;
- JSON documents are written with sorted keys and no whitespace.

Each --layer PREFIX (a path relative to the root, like `venv`) gets its own layer, after the base
layer that holds everything else. Device nodes, fifos and sockets are refused: a container runtime
provides /dev.

  SOURCE_DATE_EPOCH=... mkimage.py ROOTFS OUT.tar --layer venv --entrypoint /venv/fn/bin/function \\
      --user 65532:65532 --port 9443 --tag function-inference-cluster:dev
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import gzip
import hashlib
import io
import itertools
import json
import os
import stat
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

# gzip level of the layers: part of the digest, so it is fixed here and not an option.
COMPRESS_LEVEL = 6
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def canonical_json(doc: object) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Digesting(io.RawIOBase):
    """A write-only stream that passes bytes on and keeps their sha256 and count."""

    def __init__(self, out) -> None:
        self.out = out
        self.hash = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.hash.update(data)
        self.size += len(data)
        self.out.write(data)
        return len(data)

    @property
    def digest(self) -> str:
        return "sha256:" + self.hash.hexdigest()


def walk(root: Path, rel: str, skip: frozenset[str]):
    """(relative path, absolute path, lstat) of everything under root/rel, in byte order, depth
    first, leaving out the paths in skip and what is under them."""
    with os.scandir(root / rel if rel else root) as it:
        entries = sorted(it, key=lambda e: os.fsencode(e.name))
    for entry in entries:
        path = f"{rel}/{entry.name}" if rel else entry.name
        if path in skip:
            continue
        st = entry.stat(follow_symlinks=False)
        yield path, entry.path, st
        if stat.S_ISDIR(st.st_mode):  # lstat: a symlink to a directory is not walked into
            yield from walk(root, path, skip)


@dataclass
class Layer:
    file: Path  # the gzip blob
    digest: str  # of the gzip blob
    size: int
    diff_id: str  # of the uncompressed tar


def entry(path: str, full: str, st: os.stat_result, epoch: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.mode = stat.S_IMODE(st.st_mode)
    info.uid, info.gid = st.st_uid, st.st_gid
    info.uname = info.gname = ""
    info.mtime = min(int(st.st_mtime), epoch)
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(st.st_mode):
        info.type = tarfile.SYMTYPE
        info.linkname = os.readlink(full)
    elif stat.S_ISREG(st.st_mode):
        info.type = tarfile.REGTYPE
        info.size = st.st_size
    else:
        raise SystemExit(f"mkimage: {path}: not a file, directory or symlink; remove it")
    return info


def pack_layer(root: Path, top: str, skip: frozenset[str], epoch: int, file: Path) -> Layer:
    """One gzip layer of root/top (all of root when top is ""), without the paths in skip."""
    with open(file, "wb") as raw:
        compressed = Digesting(raw)
        with gzip.GzipFile(
            filename="", mode="wb", fileobj=compressed, compresslevel=COMPRESS_LEVEL, mtime=0
        ) as gz:
            plain = Digesting(gz)
            with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                entries = walk(root, top, skip)
                if top:
                    own = (top, str(root / top), os.lstat(root / top))
                    entries = itertools.chain([own], entries)
                first: dict[tuple[int, int], str] = {}  # hard links: (device, inode) -> first path
                for path, full, st in entries:
                    info = entry(path, full, st, epoch)
                    if info.type == tarfile.REGTYPE and st.st_nlink > 1:
                        seen = first.setdefault((st.st_dev, st.st_ino), path)
                        if seen != path:
                            info.type, info.size, info.linkname = tarfile.LNKTYPE, 0, seen
                    if info.type == tarfile.REGTYPE:
                        with open(full, "rb") as f:
                            tar.addfile(info, f)
                    else:
                        tar.addfile(info)
    return Layer(file, compressed.digest, compressed.size, plain.digest)


def pack_layers(root: Path, prefixes: list[str], epochs: list[int], scratch: Path) -> list[Layer]:
    """The base layer (all but the prefixes) and one layer per prefix, compressed in parallel."""
    tops = ["", *prefixes]
    skips = [frozenset(prefixes), *(frozenset() for _ in prefixes)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(tops)) as pool:
        futures = [
            pool.submit(pack_layer, root, top, skip, epochs[i], scratch / f"layer{i}.tar.gz")
            for i, (top, skip) in enumerate(zip(tops, skips, strict=True))
        ]
        return [f.result() for f in futures]


def image_name(tag: str) -> str:
    """The full name Docker writes into index.json (docker.io/library/ for short names)."""
    name = tag
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = "docker.io/library/" + name
    elif "." not in first and ":" not in first and first != "localhost":
        name = "docker.io/" + name
    return name


def build(args: argparse.Namespace, epoch: int) -> dict:
    root = Path(args.rootfs)
    prefixes = [p.strip("/") for p in args.layer]
    # The base layer may be clamped earlier (--base-epoch), so that it does not move with every
    # commit but only with its own content.
    epochs = [min(epoch, args.base_epoch or epoch), *(epoch for _ in prefixes)]

    def rfc3339(t: int) -> str:
        return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    created = rfc3339(epoch)
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="mkimage.", dir=out.parent) as tmp:
        layers = pack_layers(root, prefixes, epochs, Path(tmp))
        base = "mkimage.py: base (all but " + ", ".join(f"/{p}" for p in prefixes) + ")"
        history = [
            {"created": rfc3339(t), "created_by": by}
            for t, by in zip(epochs, [base, *(f"mkimage.py: /{p}" for p in prefixes)], strict=True)
        ]
        image_config: dict = {
            "Entrypoint": args.entrypoint,
            "Env": args.env or [DEFAULT_PATH],
            "User": args.user,
            "WorkingDir": args.workdir,
        }
        if args.port:
            image_config["ExposedPorts"] = {f"{p}/tcp": {} for p in args.port}
        if args.label:
            image_config["Labels"] = dict(label.split("=", 1) for label in args.label)
        config = canonical_json(
            {
                "architecture": args.arch,
                "os": "linux",
                "created": created,
                "config": image_config,
                "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
                "history": history,
            }
        )
        manifest = canonical_json(
            {
                "schemaVersion": 2,
                "mediaType": MEDIA_MANIFEST,
                "config": {
                    "mediaType": MEDIA_CONFIG,
                    "digest": sha256(config),
                    "size": len(config),
                },
                "layers": [
                    {"mediaType": MEDIA_LAYER, "digest": layer.digest, "size": layer.size}
                    for layer in layers
                ],
            }
        )
        index = canonical_json(
            {
                "schemaVersion": 2,
                "mediaType": MEDIA_INDEX,
                "manifests": [
                    {
                        "mediaType": MEDIA_MANIFEST,
                        "digest": sha256(manifest),
                        "size": len(manifest),
                        "platform": {"architecture": args.arch, "os": "linux"},
                        "annotations": {
                            "io.containerd.image.name": image_name(args.tag),
                            "org.opencontainers.image.ref.name": args.tag.rsplit(":", 1)[-1],
                        },
                    }
                ],
            }
        )

        def blob(digest: str) -> str:
            return "blobs/sha256/" + digest.split(":", 1)[1]

        docker_manifest = canonical_json(
            [
                {
                    "Config": blob(sha256(config)),
                    "RepoTags": [args.tag],
                    "Layers": [blob(layer.digest) for layer in layers],
                }
            ]
        )
        # name -> bytes or a file; written in byte order of the names.
        members: dict[str, bytes | Path] = {
            "oci-layout": canonical_json({"imageLayoutVersion": "1.0.0"}),
            "index.json": index,
            "manifest.json": docker_manifest,
            blob(sha256(config)): config,
            blob(sha256(manifest)): manifest,
        }
        for layer in layers:
            members[blob(layer.digest)] = layer.file

        partial = out.with_name(out.name + ".partial")
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
            for directory in ("blobs", "blobs/sha256"):
                info = tarfile.TarInfo(directory)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, epoch
                tar.addfile(info)
            for name in sorted(members):
                content = members[name]
                info = tarfile.TarInfo(name)
                info.mode, info.mtime = 0o644, epoch
                if isinstance(content, Path):
                    info.size = content.stat().st_size
                    with open(content, "rb") as f:
                        tar.addfile(info, f)
                else:
                    info.size = len(content)
                    tar.addfile(info, io.BytesIO(content))
        partial.replace(out)

    return {
        "tarball": str(out),
        "tarball_sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
        "manifest": sha256(manifest),
        "config": sha256(config),
        "layers": [
            {"digest": layer.digest, "diff_id": layer.diff_id, "size": layer.size}
            for layer in layers
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("rootfs", help="the root filesystem directory")
    parser.add_argument("out", help="the image tarball to write")
    parser.add_argument("--layer", action="append", default=[], help="a path in its own layer")
    parser.add_argument("--entrypoint", action="append", required=True, help="repeat for args")
    parser.add_argument("--user", required=True, help="uid:gid")
    parser.add_argument("--port", action="append", default=[], help="an exposed TCP port")
    parser.add_argument("--env", action="append", default=[], help=f"default {DEFAULT_PATH}")
    parser.add_argument("--label", action="append", default=[], help="KEY=VALUE")
    parser.add_argument("--workdir", default="/")
    parser.add_argument(
        "--base-epoch", type=int, help="clamp the base layer's mtimes to this time if earlier"
    )
    parser.add_argument("--arch", default="amd64")
    parser.add_argument("--tag", required=True, help="the docker save RepoTag, name:tag")
    args = parser.parse_args(argv)
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    if not epoch.isdigit():
        parser.error("SOURCE_DATE_EPOCH must be set to a Unix time (git log -1 --format=%ct)")
    print(json.dumps(build(args, int(epoch)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
