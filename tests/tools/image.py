"""The function's runtime image without a container engine: build it, unpack it, run it.

Shared by tests/test_image.py (the image itself) and the real control plane of tests/e2e, which
runs the function Crossplane calls from the image. No pytest here: errors are exceptions.

- `build` runs `make image` (hack/image/build-image.sh) from a `snapshot` of the sources it reads;
- `unpack` lays out the layers of a `docker save` style archive (an image tarball or an .xpkg) in
  order, owners kept, as a container runtime does;
- `command` is the argv that runs an unpacked root's entrypoint in fresh mount, PID, IPC and UTS
  namespaces, on a read-only bind of the root (plus read-only binds of host folders, such as a TLS
  certificate folder), a new /proc, a tmpfs /dev and /tmp, chrooted as the image's user, with only
  the image's Env. The entrypoint is PID 1 of its namespace, as in a pod, and `entrypoint_pid`
  finds its host PID, which is how it is stopped (`stop`).

Building and running need root and mmdebstrap (`build_host_missing` says what is missing).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What build-image.sh reads: the wheel's sources, and the pinned module of the CRDs it fetches.
IMAGE_INPUTS = ("pyproject.toml", "README.md", "function", "hack/crds")
TOOLS = ("mmdebstrap", "dpkg-deb", "unshare", "chroot", "mount", "mknod", "tar", "git", "make")
MAKE = ("make", "--no-print-directory", "-C", str(ROOT))
TARBALL = Path("image") / "runtime-amd64.tar"  # where `make image` puts it under PKG_OUT
DEBS = Path("debs")  # where build() keeps the .debs of the Debian root, under PKG_OUT


def build_host_missing() -> str | None:
    """What this host lacks to build and run the image, as a sentence; None when it has it all."""
    missing = [f"`{tool}`" for tool in TOOLS if not shutil.which(tool)]
    if os.geteuid() != 0:
        missing.insert(0, "root (mmdebstrap's root mode, chroot, unshare and mount need it)")
    if not missing:
        return None
    message = "building and running the image needs " + " and ".join(missing)
    if "`mmdebstrap`" in missing:
        message += " (apt-get install --no-install-recommends mmdebstrap)"
    return message


def run(args: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
    """Run a command to completion; a non-zero exit raises with its output."""
    result = subprocess.run(list(args), capture_output=True, text=True, check=False, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}\n{result.stdout}\n{result.stderr}")
    return result


# --- building -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sources:
    """A copy of what the image is built from, and the SOURCE_DATE_EPOCH to build it with."""

    path: Path
    epoch: str


def snapshot(dest: Path) -> Sources:
    """Copy the image's inputs to dest, so edits or commits made meanwhile cannot move a digest."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in IMAGE_INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, dest / name)
    epoch = os.environ.get("SOURCE_DATE_EPOCH") or (
        run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"]).stdout.strip()
    )
    return Sources(dest, epoch)


def build(sources: Sources, out: Path, debs: Path | None = None) -> Path:
    """`make image` from the sources into PKG_OUT=out; the tarball's path.

    The .debs its Debian root is made of are kept in out/DEBS; with `debs` (an earlier build's
    out/DEBS), the root is made of exactly those instead of what the mirror serves now.
    """
    env = {**os.environ, "SOURCE_DATE_EPOCH": sources.epoch, "DEBS_OUT": str(out / DEBS)}
    if debs is not None:
        env["DEBIAN_DEBS"] = str(debs)
    run([*MAKE, "image", f"PKG_OUT={out}", f"IMAGE_SRC={sources.path}"], env=env, timeout=600)
    return out / TARBALL


@dataclasses.dataclass
class Image:
    tarball: Path
    manifest: str  # the OCI manifest digest, from index.json
    config: dict

    @property
    def settings(self) -> dict:
        return self.config["config"]

    @property
    def debs(self) -> Path:
        """The .debs its Debian root was made of (build() keeps them beside the tarball)."""
        return self.tarball.parent.parent / DEBS


def config(archive: Path) -> dict:
    """The image config of a `docker save` style archive (an image tarball or an .xpkg)."""
    with tarfile.open(archive) as tar:
        [docker] = json.load(tar.extractfile("manifest.json"))
        return json.load(tar.extractfile(docker["Config"]))


def read_image(tarball: Path) -> Image:
    with tarfile.open(tarball) as tar:
        [manifest] = json.load(tar.extractfile("index.json"))["manifests"]
    return Image(tarball, manifest["digest"], config(tarball))


# --- unpacking ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Rootfs:
    """An unpacked image: its root folder and its config settings (Entrypoint, User, Env, ...)."""

    root: Path
    settings: dict

    @property
    def ids(self) -> tuple[int, int]:
        """The numeric uid and gid the image runs as (build-image.sh writes numbers)."""
        user, _, group = self.settings["User"].partition(":")
        if not (user.isdigit() and (group or user).isdigit()):
            raise ValueError(f"image user {self.settings['User']!r} is not numeric uid:gid")
        return int(user), int(group or user)


def unpack(archive: Path, root: Path) -> Path:
    """The layers of a `docker save` style archive, in order, as a container runtime lays them out."""
    root.mkdir()
    with tarfile.open(archive) as tar:
        [docker] = json.load(tar.extractfile("manifest.json"))
        for layer in docker["Layers"]:
            untar = subprocess.Popen(
                ["tar", "-xzp", "--numeric-owner", "-C", str(root), "-f", "-"],
                stdin=subprocess.PIPE,
            )
            with untar.stdin:
                shutil.copyfileobj(tar.extractfile(layer), untar.stdin, 1 << 20)
            if untar.wait(timeout=120) != 0:
                raise RuntimeError(f"tar could not unpack {layer} of {archive}")
    return root


def rootfs(archive: Path, root: Path) -> Rootfs:
    return Rootfs(unpack(archive, root), config(archive)["config"])


# --- running --------------------------------------------------------------------------------------

# Inside the namespaces: a read-only bind of the root, read-only binds of the host folders asked for
# (`start ROOT N SRC1 DEST1 ... SRCN DESTN CMD...`), a new /proc, a tmpfs /dev with the usual nodes,
# a tmpfs /tmp; then the entrypoint, chrooted as the image's user, with only the image's Env.
START = r"""
set -eu
root=$1; binds=$2; shift 2
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
while [ "$binds" -gt 0 ]; do
  mount --bind "$1" "$root$2"
  mount -o remount,bind,ro "$root$2"
  shift 2; binds=$((binds - 1))
done
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=0755,size=1m tmpfs "$root/dev"
for node in null:3 zero:5 full:7 random:8 urandom:9; do
  mknod -m 0666 "$root/dev/${node%:*}" c 1 "${node#*:}"
done
mount -t tmpfs -o mode=1777,size=16m tmpfs "$root/tmp"
exec env -i "$@"
"""

# The outer `unshare --pid --kill-child` is a guard: its child, the inner unshare, is the init of a
# PID namespace that holds the entrypoint's, and dies with the outer one (a parent-death signal),
# which kills every process in that namespace. The entrypoint cannot carry such a signal itself:
# the kernel clears it when chroot switches to the image's user. So whoever kills the outer process
# (directly, or by dying with a parent-death signal of its own) leaves nothing running.
GUARD = ("unshare", "--pid", "--fork", "--kill-child")
NAMESPACES = ("unshare", "--mount", "--pid", "--ipc", "--uts", "--fork", "--kill-child")
DEPTH = 2  # the entrypoint is the outer process's grandchild (outer unshare, inner unshare, it)


def command(
    image: Rootfs,
    args: Sequence[str],
    *,
    binds: Sequence[tuple[Path, str]] = (),
    env: Sequence[str] = (),
) -> list[str]:
    """The argv that runs the image's entrypoint with args (see START), as the image's user.

    binds: (host folder, absolute path in the image) pairs, mounted read-only; their mount points
    are created in the unpacked root. env: `NAME=value` pairs added to the image's Env.
    """
    pairs: list[str] = []
    for source, target in binds:
        inside = Path(target)
        if not inside.is_absolute() or ".." in inside.parts:
            raise ValueError(f"bind target {target!r} is not an absolute path in the image")
        mount_point = image.root / inside.relative_to("/")
        mount_point.mkdir(parents=True, exist_ok=True)
        if not mount_point.resolve().is_relative_to(image.root.resolve()):
            raise ValueError(f"bind target {target!r} leaves the image's root")
        pairs += [str(Path(source).resolve()), str(inside)]
    chroot = [shutil.which("chroot") or "chroot", f"--userspec={image.settings['User']}"]
    return [
        *GUARD,
        *NAMESPACES,
        *("sh", "-c", START, "start", str(image.root), str(len(binds)), *pairs),
        *(*image.settings["Env"], "HOME=/home/nonroot", *env),
        *(*chroot, str(image.root), *image.settings["Entrypoint"], *args),
    ]


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def entrypoint_pid(outer: int, timeout: float = 10.0) -> int:
    """The host PID of the entrypoint that `command` started under the process `outer`."""
    deadline = time.monotonic() + timeout
    while True:
        pid, level = outer, 0
        while level < DEPTH and len(found := children(pid)) == 1:
            pid, level = found[0], level + 1
        if level == DEPTH:
            return pid
        if time.monotonic() > deadline:
            raise LookupError(f"no entrypoint under PID {outer} (stopped at {pid}, level {level})")
        time.sleep(0.05)


def stop(process: subprocess.Popen, pid: int | None, grace: float = 10.0) -> None:
    """SIGTERM the entrypoint by its PID (util-linux unshare ignores SIGTERM while it waits),
    then, after grace seconds, SIGKILL it and the outer unshare (which takes the rest with it)."""
    if process.poll() is None and pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace if pid is not None else 0)
    except subprocess.TimeoutExpired:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.kill()
        process.wait(timeout=10)
