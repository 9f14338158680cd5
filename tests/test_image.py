"""The runtime image: built without Docker (`make image`), reproducible, and runnable as packaged.

`make image` (hack/image/build-image.sh) runs twice into two temporary PKG_OUTs with their own work
folders, from one snapshot of the sources and one SOURCE_DATE_EPOCH (so edits or commits made
meanwhile cannot move a digest), the second from the .debs the first was made of (DEBIAN_DEBS: a
Debian release between the two builds, or deb.debian.org's mirrors out of step, would move the
Debian layer); both tarballs must be identical. The first build is the session's
(tests/conftest.py), which the e2e control plane runs its function from too. The image is then
unpacked from the tarball and, after `make package` embedded it, from the function .xpkg, like a
container runtime does: each layer of manifest.json in order, owners kept. Its entrypoint runs with
the image's own config (entrypoint, user, PATH) in fresh mount, PID, IPC and UTS namespaces, on a
read-only bind of the root with a new /proc, a tmpfs /dev and /tmp, chrooted as the image's user, and
answers real RunFunction calls on a loopback port. It is stopped by its PID (tests/tools/image.py).

Building needs root and mmdebstrap (`.ci/run` installs it). Without them CI fails, and elsewhere the
tests skip with what is missing.
"""

import contextlib
import dataclasses
import hashlib
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from tests.builders import all_classes, example
from tests.conftest import ROOT
from tests.tools import image as images
from tests.tools.image import Image
from tests.tools.server import free_port, wait_for_port

MAKE = images.MAKE
DEBIAN_PYTHON = {"12": "3.11", "13": "3.13"}  # python3 of each Debian release


@pytest.fixture(scope="session")
def image_builds(runtime_image, image_sources, tmp_path_factory) -> tuple[Image, Image]:
    """The session's `make image`, and a second one from the same snapshot, epoch and .debs."""
    again = images.build(image_sources, tmp_path_factory.mktemp("image-b"), runtime_image.debs)
    return runtime_image, images.read_image(again)


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
    debs = [sorted(p.name for p in i.debs.iterdir()) for i in (a, b)]
    assert debs[0] and debs[0] == debs[1], "the second build was not made of the first one's .debs"
    assert a.manifest == b.manifest, (
        "the image is not reproducible; uncompressed layer digests: "
        f"{a.config['rootfs']['diff_ids']} vs {b.config['rootfs']['diff_ids']}"
    )
    assert _sha256(a.tarball) == _sha256(b.tarball)


@pytest.fixture(scope="session")
def function_xpkg(image, tmp_path_factory, crossplane) -> Path:
    """`make package` with the image at its place in PKG_OUT, so it is embedded."""
    out = tmp_path_factory.mktemp("pkg-with-image")
    (out / "image").mkdir()
    shutil.copy(image.tarball, out / "image" / "runtime-amd64.tar")
    images.run(
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
    unpacked = images.rootfs(archive, tmp_path_factory.mktemp(f"rootfs-{request.param}") / "root")
    return unpacked.root, unpacked.settings


def test_xpkg_carries_the_image_layers_unchanged(image, function_xpkg):
    config = images.config(function_xpkg)
    ours = image.config["rootfs"]["diff_ids"]
    assert config["rootfs"]["diff_ids"][: len(ours)] == ours
    for key in ("Entrypoint", "User", "ExposedPorts", "WorkingDir", "Env"):
        assert config["config"][key] == image.settings[key], key


# --- running it -----------------------------------------------------------------------------------


@dataclasses.dataclass
class Running:
    target: str
    pid: int  # the function's own PID (PID 1 of its namespace)


@contextlib.contextmanager
def run_image(root: Path, settings: dict, log: Path) -> Iterator[Running]:
    port = free_port()
    argv = images.command(
        images.Rootfs(root, settings), ["--insecure", f"--address=127.0.0.1:{port}"]
    )
    with open(log, "wb") as out:
        unshare = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        )
    pid = None
    try:
        try:
            wait_for_port(port, unshare, timeout=60)
            pid = images.entrypoint_pid(unshare.pid)
        except (RuntimeError, TimeoutError, LookupError) as e:
            pytest.fail(f"the image's entrypoint did not serve: {e}\n{log.read_text()}")
        yield Running(f"127.0.0.1:{port}", pid)
    finally:
        images.stop(unshare, pid)


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


# A runner that starts the image as the e2e control plane does (a parent-death signal on the outer
# process), says the PIDs, and waits to be killed.
RUNNER = """
import ctypes, json, signal, subprocess, sys
from tests.tools import image
die = lambda: ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
outer = subprocess.Popen(json.loads(sys.argv[1]), stdout=subprocess.DEVNULL, preexec_fn=die)
print(image.entrypoint_pid(outer.pid), flush=True)
outer.wait()
"""


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")", 1)[1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_the_entrypoint_dies_with_a_killed_runner(unpacked):
    """The kernel clears the entrypoint's own parent-death signal when chroot switches user: the
    PID namespace around it still dies with the process that started it, even on SIGKILL."""
    root, settings = unpacked
    argv = images.command(images.Rootfs(root, settings), ["--insecure", "--address=127.0.0.1:0"])
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, json.dumps(argv)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pid = int(runner.stdout.readline())
        user, deadline = tuple(settings["User"].split(":")), time.monotonic() + 30
        while _status_ids(pid) != user:  # until chroot switched to the image's user
            assert time.monotonic() < deadline, f"PID {pid} did not become {user}"
            time.sleep(0.05)
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=10)
        assert _gone(pid), f"the entrypoint (PID {pid}) outlived its runner"
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        runner.stdout.close()


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
