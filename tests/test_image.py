"""The runtime image: built without Docker (`make image`), reproducible, and runnable as packaged.

`make image` (hack/image/build-image.sh) runs twice, at the same time, into two temporary PKG_OUTs
with their own work folders, from one snapshot of the sources and one SOURCE_DATE_EPOCH (so edits or
commits made meanwhile cannot move a digest); both tarballs must be identical. The image is then
unpacked from the tarball and, after `make package` embedded it, from the function .xpkg, like a
container runtime does: each layer of manifest.json in order, owners kept. Its entrypoint runs with
the image's own config (entrypoint, user, PATH) in fresh mount, PID, IPC and UTS namespaces, on a
read-only bind of the root with a new /proc, a tmpfs /dev and /tmp, chrooted as the image's user, and
answers real RunFunction calls on a loopback port. It is stopped by its PID.

Building needs root and mmdebstrap (`.ci/run` installs it). Without them CI fails, and elsewhere the
tests skip with what is missing.
"""

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from tests.builders import all_classes, example
from tests.conftest import ROOT
from tests.tools.server import free_port, wait_for_port

IMAGE_INPUTS = ("pyproject.toml", "README.md", "function")  # what build-image.sh reads
TOOLS = ("mmdebstrap", "dpkg-deb", "unshare", "chroot", "mount", "mknod", "tar", "git", "make")
MAKE = ("make", "--no-print-directory", "-C", str(ROOT))
DEBIAN_PYTHON = {"12": "3.11", "13": "3.13"}  # python3 of each Debian release


def _require_build_host() -> None:
    missing = [f"`{tool}`" for tool in TOOLS if not shutil.which(tool)]
    if os.geteuid() != 0:
        missing.insert(0, "root (mmdebstrap's root mode, chroot, unshare and mount need it)")
    if not missing:
        return
    message = "building and running the image needs " + " and ".join(missing)
    if "`mmdebstrap`" in missing:
        message += " (apt-get install --no-install-recommends mmdebstrap)"
    if os.environ.get("CI"):
        pytest.fail(f"CI: {message}; .ci/run must provide it")
    pytest.skip(message)


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)
    assert result.returncode == 0, f"{' '.join(args)}\n{result.stdout}\n{result.stderr}"
    return result


@dataclasses.dataclass
class Image:
    tarball: Path
    manifest: str  # the OCI manifest digest, from index.json
    config: dict

    @property
    def settings(self) -> dict:
        return self.config["config"]


def _config(archive: Path) -> dict:
    """The image config of a `docker save` style archive (an image tarball or an .xpkg)."""
    with tarfile.open(archive) as tar:
        [docker] = json.load(tar.extractfile("manifest.json"))
        return json.load(tar.extractfile(docker["Config"]))


def _read_image(tarball: Path) -> Image:
    with tarfile.open(tarball) as tar:
        [manifest] = json.load(tar.extractfile("index.json"))["manifests"]
    return Image(tarball, manifest["digest"], _config(tarball))


@pytest.fixture(scope="session")
def image_builds(tmp_path_factory) -> tuple[Image, Image]:
    """Two `make image` runs from one snapshot of the sources, in parallel."""
    _require_build_host()
    snapshot = tmp_path_factory.mktemp("image-src")
    for name in IMAGE_INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, snapshot / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, snapshot / name)
    epoch = os.environ.get("SOURCE_DATE_EPOCH") or (
        _run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"]).stdout.strip()
    )
    outs = [tmp_path_factory.mktemp(f"image-{n}") for n in ("a", "b")]

    def build(out: Path) -> Path:
        _run(
            [*MAKE, "image", f"PKG_OUT={out}", f"IMAGE_SRC={snapshot}"],
            env={**os.environ, "SOURCE_DATE_EPOCH": epoch},
            timeout=600,
        )
        return out / "image" / "runtime-amd64.tar"

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        a, b = pool.map(build, outs)
    return _read_image(a), _read_image(b)


@pytest.fixture(scope="session")
def image(image_builds) -> Image:
    return image_builds[0]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def test_two_builds_give_the_same_bytes(image_builds):
    a, b = image_builds
    assert a.manifest == b.manifest, (
        "the image is not reproducible; uncompressed layer digests: "
        f"{a.config['rootfs']['diff_ids']} vs {b.config['rootfs']['diff_ids']}"
    )
    assert _sha256(a.tarball) == _sha256(b.tarball)


def _unpack(archive: Path, root: Path) -> Path:
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
            assert untar.wait(timeout=120) == 0, f"tar could not unpack {layer}"
    return root


@pytest.fixture(scope="session")
def function_xpkg(image, tmp_path_factory, crossplane) -> Path:
    """`make package` with the image at its place in PKG_OUT, so it is embedded."""
    out = tmp_path_factory.mktemp("pkg-with-image")
    (out / "image").mkdir()
    shutil.copy(image.tarball, out / "image" / "runtime-amd64.tar")
    _run(
        [*MAKE, "package", f"PKG_OUT={out}", f"CROSSPLANE={crossplane}"],
        timeout=300,
    )
    return out / "function" / "function-inference-cluster.xpkg"


@pytest.fixture(scope="session", params=["tarball", "xpkg"])
def unpacked(request, image, tmp_path_factory) -> tuple[Path, dict]:
    """(root filesystem, image config settings) from the image tarball or from the function xpkg."""
    if request.param == "tarball":
        archive = image.tarball
    else:
        archive = request.getfixturevalue("function_xpkg")
    root = _unpack(archive, tmp_path_factory.mktemp(f"rootfs-{request.param}") / "root")
    return root, _config(archive)["config"]


def test_xpkg_carries_the_image_layers_unchanged(image, function_xpkg):
    config = _config(function_xpkg)
    ours = image.config["rootfs"]["diff_ids"]
    assert config["rootfs"]["diff_ids"][: len(ours)] == ours
    for key in ("Entrypoint", "User", "ExposedPorts", "WorkingDir", "Env"):
        assert config["config"][key] == image.settings[key], key


# --- running it -----------------------------------------------------------------------------------

# Inside the namespaces: a read-only bind of the root, a new /proc, a tmpfs /dev with the usual
# nodes, a tmpfs /tmp; then the entrypoint, chrooted as the image's user, with only the image's Env.
START = r"""
set -eu
root=$1; shift
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=0755,size=1m tmpfs "$root/dev"
for node in null:3 zero:5 full:7 random:8 urandom:9; do
  mknod -m 0666 "$root/dev/${node%:*}" c 1 "${node#*:}"
done
mount -t tmpfs -o mode=1777,size=16m tmpfs "$root/tmp"
exec env -i "$@"
"""


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


@dataclasses.dataclass
class Running:
    target: str
    pid: int  # the function's own PID (PID 1 of its namespace)


@contextlib.contextmanager
def run_image(root: Path, settings: dict, log: Path) -> Iterator[Running]:
    port = free_port()
    chroot = [shutil.which("chroot"), f"--userspec={settings['User']}", str(root)]
    command = [*settings["Entrypoint"], "--insecure", f"--address=127.0.0.1:{port}"]
    with open(log, "wb") as out:
        unshare = subprocess.Popen(
            [
                *("unshare", "--mount", "--pid", "--ipc", "--uts", "--fork", "--kill-child"),
                *("sh", "-c", START, "start", str(root)),
                *(*settings["Env"], "HOME=/home/nonroot", *chroot, *command),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    pid = None
    try:
        try:
            wait_for_port(port, unshare, timeout=60)
        except (RuntimeError, TimeoutError) as e:
            pytest.fail(f"the image's entrypoint did not serve: {e}\n{log.read_text()}")
        [pid] = _children(unshare.pid)
        yield Running(f"127.0.0.1:{port}", pid)
    finally:
        # util-linux unshare ignores SIGTERM while it waits, so stop the function by its PID.
        for pid_ in [pid] if pid else _children(unshare.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid_, signal.SIGTERM)
        try:
            unshare.wait(timeout=10)
        except subprocess.TimeoutExpired:
            for pid_ in _children(unshare.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid_, signal.SIGKILL)
            unshare.kill()
            unshare.wait()


def _status_ids(pid: int) -> tuple[str, str]:
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return fields["Uid"].split()[0], fields["Gid"].split()[0]


def _root_mount_options(pid: int) -> list[str]:
    """The options of the mount a process sees as its /."""
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/":
            return fields[5].split(",")
    raise AssertionError(f"no / in /proc/{pid}/mountinfo")


def _call(target: str, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    with grpc.insecure_channel(target) as channel:
        return grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=30)


def test_the_image_answers_run_function(unpacked, tmp_path):
    root, settings = unpacked
    xr, classes = example("existing")
    class_req = fnv1.RunFunctionRequest()
    class_req.observed.composite.resource.update(classes[0])
    cluster_req = fnv1.RunFunctionRequest()
    cluster_req.observed.composite.resource.update(xr)
    for body in all_classes(classes)["inference-classes"]:
        cluster_req.required_resources["inference-classes"].items.add().resource.update(body)

    with run_image(root, settings, tmp_path / "function.log") as server:
        assert _status_ids(server.pid) == tuple(settings["User"].split(":"))
        assert "ro" in _root_mount_options(server.pid)
        class_rsp = _call(server.target, class_req)
        cluster_rsp = _call(server.target, cluster_req)

    assert class_rsp.desired.composite.ready == fnv1.READY_TRUE
    accepted = {c.type: c for c in class_rsp.conditions}["Accepted"]
    assert accepted.status == fnv1.STATUS_CONDITION_TRUE, accepted

    assert not [r for r in cluster_rsp.results if r.severity == fnv1.SEVERITY_FATAL], (
        cluster_rsp.results
    )
    assert len(cluster_rsp.desired.resources) > 0
    kinds = {
        resource.struct_to_dict(r.resource)["kind"] for r in cluster_rsp.desired.resources.values()
    }
    assert "ClusterProviderConfig" in kinds, kinds


# --- the Dockerfile and the image agree -----------------------------------------------------------


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    lines = [
        line for line in (ROOT / "Dockerfile").read_text().splitlines() if not line.startswith("#")
    ]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    return [
        (words[0].upper(), words[1].strip() if len(words) > 1 else "")
        for line in text.splitlines()
        if (words := line.strip().split(None, 1))
    ]


def _final_stage() -> tuple[str, dict[str, str]]:
    instructions = _dockerfile()
    last_from = max(i for i, (op, _) in enumerate(instructions) if op == "FROM")
    stage = instructions[last_from:]
    return stage[0][1], {op: args for op, args in stage[1:] if op != "COPY"}


def _ids(root: Path, name: str, database: str) -> str:
    """A user or group name (or number) as the image's /etc/passwd or /etc/group number it."""
    if name.isdigit():
        return name
    for line in (root / "etc" / database).read_text().splitlines():
        fields = line.split(":")
        if fields[0] == name:
            return fields[2]
    raise AssertionError(f"{name} is not in the image's /etc/{database}")


def test_dockerfile_and_image_agree(unpacked):
    base, final = _final_stage()
    root, settings = unpacked

    assert settings["Entrypoint"] == json.loads(final["ENTRYPOINT"])
    assert settings["WorkingDir"] == final["WORKDIR"]
    assert set(settings["ExposedPorts"]) == {
        p if "/" in p else f"{p}/tcp" for p in final["EXPOSE"].split()
    }
    user, _, group = final["USER"].partition(":")
    assert settings["User"] == f"{_ids(root, user, 'passwd')}:{_ids(root, group or user, 'group')}"
    venv = root / "venv" / "fn"
    assert (venv.stat().st_uid, venv.stat().st_gid) == (65532, 65532)  # COPY --chown=nonroot

    # Python: the Dockerfile's Debian release (both stages) against the image's Debian and venv.
    releases = {m for _, args in _dockerfile() for m in re.findall(r"debian:?(\d+)", args)}
    assert len(releases) == 1, f"the Dockerfile mixes Debian releases: {releases}"
    [release] = releases
    assert release in base
    debian = (root / "etc" / "debian_version").read_text().split(".")[0]
    venv_cfg = dict(line.split(" = ", 1) for line in (venv / "pyvenv.cfg").read_text().splitlines())
    python = ".".join(venv_cfg["version"].split(".")[:2])
    assert (debian, python) == (release, DEBIAN_PYTHON[release])
    assert (venv / "bin" / f"python{python}").exists()
