"""The CRD Job (function/serving/crd_job.py) against a real API server, a real OCI registry and the
real Helm: issue 64's proof that a chart's crds/ move with the chart, over what Helm installed.

It runs, on free 127.0.0.1 ports and stopped by PID (tests/e2e/controlplane.py's Supervisor):
- an etcd of its own and a workload cluster on it (tests/e2e/workload.py: kube-apiserver,
  kube-controller-manager, kube-scheduler, kwok); no Crossplane, no providers;
- the CNCF Distribution registry (`make e2e-tools`, tests/tools/registry), over plain HTTP, to
  which the real Helm v3.21.1 pushes a chart of our own in two versions
  (tests/e2e/stand-in-charts/crd-job: 0.2.0 changes Widget's schema and adds Gadget); the digests are read
  back from the registry.

The Job is the one the function composes (`crd_job.job_resources`), for that chart at that
registry. Its RBAC is applied as provider-kubernetes would (the admin's forced server-side apply);
no kubelet runs its pod: its containers' commands, taken from the composed manifest, run here as
processes, in the pod's order (the init container to completion first), as the kubelet would
run them in the images:
- `fetch`: the real oras (tests/tools/oras, the version IMAGES["oras"] pins) with the container's
  args and env, against the local registry, by digest;
- `apply`: bash with the container's command and env, kubectl being the real kubectl v1.35
  (`.tools/bin/kubectl`), jq, tar and sha256sum this host's;
- the emptyDir is a folder of its own (its mount path rewritten in args and env), and the API
  server is reached with a token of the Job's ServiceAccount (a TokenRequest against the real API
  server; what the kubelet would project), through a kubeconfig instead of the in-cluster one.

The real Job controller runs the Job too (its pods run here, reported as the kubelet would), and
the Jobs it finishes are what the function is given as observed: the release held, or moved, and
the XR told why. The last test runs the move through the real provider-helm v1.3.0 (the e2e
control plane and tests/e2e/providers.py), the only one that needs them.

Not run: the kubelet, the images (their pulls, their users and read-only root filesystems),
provider-kubernetes applying the Job (docs/testing.md).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import yaml

from function.compose import compose_cluster
from function.output import Output
from function.serving import GATEWAY_SCHEMA, GATEWAYS, crd_job
from function.serving.components import crd_job_key
from function.versions import CHARTS, IMAGES
from tests.builders import all_classes, example
from tests.charts import helm_bin
from tests.e2e import providers as real_providers
from tests.e2e.controlplane import (
    LOCALHOST,
    ROOT,
    SYSTEM_NAMESPACE,
    ControlPlane,
    Supervisor,
    bin_dir,
    free_port,
    kubeconfig_text,
)
from tests.e2e.kube import Kube, condition, wait_for
from tests.e2e.test_workload import (
    release_deployed,
    release_status,
    remove_standalone_release,
    standalone_release,
)
from tests.e2e.workload import BINARIES as WORKLOAD_BINARIES
from tests.e2e.workload import WorkloadCluster
from tests.sim.workload import inference_gateway
from tests.unit import sim

OWN_CHARTS = Path(__file__).resolve().parent / "stand-in-charts" / "crd-job"
CHART = "e2e-crds"
REPOSITORY = "charts"  # the chart is at <registry>/charts/e2e-crds
OLD, NEW = "0.1.0", "0.2.0"
WIDGETS, GADGETS = "widgets.e2e.modelplane.ai", "gadgets.e2e.modelplane.ai"
DROPPED = "e2e.modelplane.ai/dropped-in"  # an annotation only 0.1.0's Widget carries
CRD_API = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
RELEASE, RELEASE_NAMESPACE = "e2e-crds", "e2e-crds"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ORAS_MODULE = "oras.land/oras"


def tool(name: str) -> Path:
    """A binary `make e2e-tools` builds; missing is a failure, never a skip."""
    path = bin_dir() / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} not built; run `make e2e-tools`")
    return path


class Registry(Supervisor):
    """The CNCF Distribution registry on a free loopback port, storing under its workdir."""

    def __init__(self, workdir: Path):
        super().__init__(workdir)
        self.port = free_port()

    @property
    def host(self) -> str:
        return f"{LOCALHOST}:{self.port}"

    def start(self) -> Registry:
        binary = tool("registry")

        def steps():
            yield "registry", lambda: self._serve(binary)

        self.run_steps(steps)
        return self

    def _serve(self, binary: Path) -> None:
        config = self.workdir / "config.yml"
        # Distribution's configuration (docs/content/about/configuration.md): version 0.1, a
        # filesystem store, HTTP on loopback only (no TLS: clients are told plain HTTP).
        config.write_text(
            "version: 0.1\n"
            "log: {level: info}\n"
            f"storage: {{filesystem: {{rootdirectory: {self.workdir / 'data'}}}}}\n"
            f"http: {{addr: '{self.host}'}}\n"
        )
        proc = self.spawn("registry", [str(binary), "serve", str(config)])

        def answers() -> bool:
            with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2) as r:
                return r.status == 200

        self.wait_ready(proc, answers, 30, "/v2/")

    def manifest(self, repository: str, reference: str) -> tuple[str, dict]:
        """The OCI manifest at reference (a tag or digest) and the digest the registry gives it."""
        request = urllib.request.Request(
            f"http://{self.host}/v2/{repository}/manifests/{reference}",
            headers={"Accept": OCI_MANIFEST},
        )
        with urllib.request.urlopen(request, timeout=10) as r:  # noqa: S310
            return r.headers["Docker-Content-Digest"], json.load(r)


@dataclass(frozen=True)
class Pushed:
    """A chart version in the registry: its manifest digest (what the Job pins), and its archive."""

    version: str
    digest: str
    archive: Path


@dataclass
class Setup:
    cluster: WorkloadCluster
    registry: Registry
    pushed: dict[str, Pushed]
    workdir: Path
    etcd: str  # its store, for another workload cluster beside this one

    @property
    def kube(self) -> Kube:
        assert self.cluster.kube is not None
        return self.cluster.kube


def helm(workdir: Path, *args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess:
    """The real Helm v3.21.1 (provider-helm v1.3.0's), its config and caches under workdir (no
    credentials of the host's)."""
    home = workdir / "helm-home"
    env = {
        **os.environ,
        "HOME": str(home),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    more = ["--kubeconfig", str(kubeconfig)] if kubeconfig else []
    return subprocess.run(
        [helm_bin(), *args, *more],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=workdir,
        check=False,
    )


def push(workdir: Path, registry: Registry, version: str) -> Pushed:
    """`helm package` and `helm push --plain-http` the chart at version; the digest Helm reports
    is the one the registry serves the manifest by."""
    packaged = helm(workdir, "package", str(OWN_CHARTS / f"{CHART}-{version}"), "-d", str(workdir))
    assert packaged.returncode == 0, packaged.stderr
    archive = workdir / f"{CHART}-{version}.tgz"
    pushed = helm(
        workdir, "push", str(archive), f"oci://{registry.host}/{REPOSITORY}", "--plain-http"
    )
    assert pushed.returncode == 0, pushed.stderr
    said = re.search(r"^Digest: (sha256:[0-9a-f]{64})$", pushed.stdout + pushed.stderr, re.M)
    assert said, pushed
    digest, manifest = registry.manifest(f"{REPOSITORY}/{CHART}", version)
    assert digest == said.group(1)
    [layer] = [m for m in manifest["layers"] if m["mediaType"] == crd_job.HELM_LAYER]
    assert layer["digest"] == "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest()
    return Pushed(version, digest, archive)


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Setup:
    """An etcd, the workload cluster on it, the registry with both chart versions pushed."""
    workdir = tmp_path_factory.mktemp("crd-job")
    for name in ("etcd", *WORKLOAD_BINARIES):
        tool(name)
    store = ControlPlane(workdir / "etcd")
    store.run_steps(lambda: [("etcd", lambda: store._etcd(bin_dir() / "etcd"))])
    try:
        etcd = f"http://{LOCALHOST}:{store.ports.etcd}"
        with (
            WorkloadCluster(workdir / "workload", etcd, prefix="/crd-job") as cluster,
            Registry(workdir / "registry") as registry,
        ):
            pushed = {v: push(workdir, registry, v) for v in (OLD, NEW)}
            yield Setup(cluster, registry, pushed, workdir, etcd)
    finally:
        store.stop()


# --- The function's Job, and its pod run as processes -------------------------------------------


def chart_files(version: str) -> tuple[crd_job.CRDFile, ...]:
    """The chart's crds/ at version as the function pins a chart's: each file's path in the
    archive, the sha256 of its bytes, the CRDs it holds."""
    files = []
    for path in sorted((OWN_CHARTS / f"{CHART}-{version}" / "crds").glob("*.yaml")):
        data = path.read_bytes()
        names = tuple(d["metadata"]["name"] for d in yaml.safe_load_all(data) if d)
        files.append(
            crd_job.CRDFile(
                f"{CHART}/crds/{path.name}", hashlib.sha256(data).hexdigest(), tuple(sorted(names))
            )
        )
    return tuple(files)


def spec_for(setup: Setup, version: str, **changes) -> crd_job.ChartCRDs:
    """What the function would pin for the chart at version in this registry (plain HTTP)."""
    spec = crd_job.ChartCRDs(
        key=CHART,
        reference=f"{setup.registry.host}/{REPOSITORY}/{CHART}",
        version=version,
        files=chart_files(version),
        digest=setup.pushed[version].digest,
        plain_http=True,
    )
    return replace(spec, **changes)


def apply_rbac(setup: Setup, resources: dict[str, dict]) -> None:
    """The Job's namespace, ServiceAccount, ClusterRole and binding, applied as provider-kubernetes
    applies an Object's manifest (a forced server-side apply, as the cluster's admin)."""
    namespace = resources[crd_job.JOB]["metadata"]["namespace"]
    setup.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for role in (crd_job.SERVICE_ACCOUNT, crd_job.CLUSTER_ROLE, crd_job.BINDING):
        setup.kube.apply(resources[role], manager="provider-kubernetes")


def service_account_kubeconfig(setup: Setup, job: dict, folder: Path) -> Path:
    """A kubeconfig with a token of the Job's ServiceAccount, as the kubelet would project it
    (TokenRequest, bound to nothing but the account, ten minutes)."""
    namespace = job["metadata"]["namespace"]
    account = job["spec"]["template"]["spec"]["serviceAccountName"]
    answer = setup.kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
    )
    path = folder / "kubeconfig"
    cluster = setup.cluster
    path.write_text(kubeconfig_text(cluster.server, cluster.pki, answer["status"]["token"]))
    path.chmod(0o600)
    # What the kubelet projects for the pod's own clients (the programs): token and CA.
    account = folder / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(answer["status"]["token"])
    (account / "ca.crt").write_bytes(cluster.pki.ca_file.read_bytes())
    return path


def in_cluster(kubeconfig: Path, server: str) -> dict[str, str]:
    """The environment the kubelet gives a pod for the API server (KUBERNETES_SERVICE_HOST and
    _PORT), and where the account's projected files are (SERVICE_ACCOUNT_DIR: the programs'
    default is the kubelet's /var/run/secrets/kubernetes.io/serviceaccount)."""
    address = urllib.parse.urlsplit(server)
    return {
        "KUBERNETES_SERVICE_HOST": address.hostname or "",
        "KUBERNETES_SERVICE_PORT": str(address.port),
        "SERVICE_ACCOUNT_DIR": str(kubeconfig.parent / "serviceaccount"),
    }


@dataclass(frozen=True)
class Ran:
    container: str
    returncode: int
    output: str


# The images' entrypoints, for a container that gives no command: oras's image runs `oras`
# (oras-project/oras Dockerfile, ENTRYPOINT ["oras"]); distroless Python's its python3, which a
# command names by its path there (/usr/bin/python3): this host's interpreter stands for it.
ENTRYPOINTS = {"oras": "oras", "python3-debian13": "python3"}
PYTHON_IN_IMAGE = "/usr/bin/python3"


def image_name(image: str) -> str:
    return image.split("@")[0].rsplit(":", 1)[0].rsplit("/", 1)[-1]


def local(value: str, mounts: dict[str, Path]) -> str:
    """value with each mount path (as a whole path element) replaced by its local folder."""
    for mount, folder in sorted(mounts.items(), key=lambda m: -len(m[0])):
        value = re.sub(rf"(?<![\w/.-]){re.escape(mount)}(?=/|:|$|\s)", str(folder), value)
    return value


def run_pod(job: dict, kubeconfig: Path, folder: Path, server: str) -> list[Ran]:
    """The Job's pod, run here: each init container to completion, then the containers, each
    with its command and args (or its image's entrypoint), its env, and its volume mounts as
    local folders; the first failure ends the pod (restartPolicy Never)."""
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    volumes = {}
    for volume in pod.get("volumes", []):
        assert "emptyDir" in volume, volume  # nothing else is composed
        volumes[volume["name"]] = folder / "volumes" / volume["name"]
        volumes[volume["name"]].mkdir(parents=True)
    ran = []
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        # What its image puts on PATH: its own program (oras, or Python), no other's.
        path = folder / "bin" / container["name"]
        path.mkdir(parents=True)
        entrypoint = ENTRYPOINTS[image_name(container["image"])]
        found = sys.executable if entrypoint == "python3" else tool(entrypoint)
        (path / entrypoint).symlink_to(found)
        mounts = {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}
        argv = container.get("command") or [entrypoint]
        argv = [local(a, mounts) for a in [*argv, *container.get("args", [])]]
        argv = [sys.executable if a == PYTHON_IN_IMAGE else a for a in argv]
        env = {e["name"]: local(e["value"], mounts) for e in container.get("env", [])}
        proc = subprocess.run(
            argv,
            env={
                "PATH": f"{path}:{os.environ['PATH']}",
                "HOME": str(folder),
                **env,
                "KUBECONFIG": str(kubeconfig),
                **in_cluster(kubeconfig, server),
            },
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        ran.append(Ran(container["name"], proc.returncode, proc.stdout + proc.stderr))
        if proc.returncode != 0:
            break
    return ran


def run_job(setup: Setup, spec: crd_job.ChartCRDs, name: str) -> list[Ran]:
    """Compose the Job for spec, apply its RBAC, and run its pod with its account's token."""
    resources = crd_job.job_resources(spec)
    apply_rbac(setup, resources)
    folder = setup.workdir / name
    folder.mkdir()
    kubeconfig = service_account_kubeconfig(setup, resources[crd_job.JOB], folder)
    return run_pod(resources[crd_job.JOB], kubeconfig, folder, setup.cluster.server)


def crd(setup: Setup, name: str) -> dict | None:
    return setup.kube.get_or_none(*CRD_API, name)


def spec_properties(found: dict) -> dict:
    (version,) = found["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


def managers(found: dict) -> dict[str, str]:
    """Each field manager of found's object (not of its status, the API server's) and its
    operation."""
    return {
        m["manager"]: m["operation"]
        for m in found["metadata"]["managedFields"]
        if m.get("subresource") != "status"
    }


def owned(found: dict, manager: str) -> set[str]:
    """The fields of found's spec manager owns (their names, one level down)."""
    entries = [m for m in found["metadata"]["managedFields"] if m["manager"] == manager]
    spec = [(m.get("fieldsV1") or {}).get("f:spec", {}) for m in entries]
    return {key.removeprefix("f:") for fields in spec for key in fields if key.startswith("f:")}


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(tool("kubectl")), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# --- The proof ----------------------------------------------------------------------------------


def test_the_job_takes_over_what_helm_installed_and_creates_a_new_crd(setup: Setup):
    """A live cluster: the real Helm installed 0.1.0 from the registry, so Widget is Helm's (its
    fields under Helm's manager, an Update), and another manager labelled it. The function's Job
    for 0.2.0, fetched by digest, takes Widget over from Helm (Helm's entry dropped, the other
    manager's kept) and applies 0.2.0's crds/ with the function's field manager: Widget takes
    0.2.0's schema (the fields whose values differ taken from Helm's manager, which a plain apply
    refuses as conflicts), and loses what 0.2.0 drops, inside its versions and outside them (a
    short name, an annotation Helm alone owned), the other manager's label stays, Gadget is
    created, both Established, a Widget made before survives; run again (the Job's retry),
    nothing changes. Only then does the release move: `helm upgrade
    --skip-crds` (provider-helm's skipCRDs) to 0.2.0, leaving the CRDs as the Job applied them."""
    admin = setup.workdir / "admin-kubeconfig"
    admin.write_text(setup.cluster.kubeconfig_text())
    installed = helm(
        setup.workdir, "install", RELEASE, f"oci://{setup.registry.host}/{REPOSITORY}/{CHART}",
        "--version", OLD, "--plain-http", "-n", RELEASE_NAMESPACE, "--create-namespace",
        kubeconfig=admin,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    helms = crd(setup, WIDGETS)
    assert helms is not None and crd(setup, GADGETS) is None
    assert managers(helms) == {"helm": "Update"}, helms["metadata"]["managedFields"]
    assert "colour" not in spec_properties(helms)
    assert helms["spec"]["names"]["shortNames"] == ["wdg"]
    assert helms["metadata"]["annotations"] == {DROPPED: NEW}
    # Another manager's field on the CRD: the takeover must not make it the Job's to remove.
    team = {"apiVersion": CRD_API[0], "kind": CRD_API[1], "metadata": {"name": WIDGETS}}
    setup.kube.apply({**team, "metadata": {**team["metadata"], "labels": {"team": "e2e"}}},
                     manager="someone-else")  # fmt: skip
    setup.kube.apply(
        {
            "apiVersion": "e2e.modelplane.ai/v1",
            "kind": "Widget",
            "metadata": {"name": "kept", "namespace": RELEASE_NAMESPACE},
            "spec": {"size": "large"},
        }
    )

    # The control: applying 0.2.0's Widget over Helm's without taking the fields over conflicts.
    widgets_v2 = (OWN_CHARTS / f"{CHART}-{NEW}" / "crds" / "widgets.yaml").read_text()
    plain = kubectl(
        admin, "apply", "--server-side", f"--field-manager={crd_job.MANAGER}",
        "--dry-run=server", "-f", "-", stdin=widgets_v2,
    )  # fmt: skip
    assert plain.returncode != 0 and "conflict" in plain.stderr.lower(), plain

    spec = spec_for(setup, NEW)
    assert spec.crds == (GADGETS, WIDGETS)
    ran = run_job(setup, spec, "job-new")
    assert [(r.container, r.returncode) for r in ran] == [("fetch", 0), ("apply", 0)], ran

    moved, added = crd(setup, WIDGETS), crd(setup, GADGETS)
    assert moved is not None and added is not None
    assert "colour" in spec_properties(moved)
    # A field 0.2.0 drops goes too: the versions list is replaced whole (below).
    assert "legacy" in spec_properties(helms) and "legacy" not in spec_properties(moved)
    assert spec_properties(moved)["size"]["description"].endswith("its colour is sold by.")
    assert "widget" in spec_properties(added)
    for found in (moved, added):
        assert condition(found, "Established").get("status") == "True", found["status"]
        assert managers(found).get(crd_job.MANAGER) == "Apply", found["metadata"]
    # Taken over: Helm's entry is gone and the function's manager owns what Helm owned, so what
    # 0.2.0 drops outside the versions list goes too (inside it, the list is atomic: apiextensions
    # v1 types.go, +listType=atomic); another manager's entry and field stay.
    assert managers(moved) == {crd_job.MANAGER: "Apply", "someone-else": "Apply"}, moved
    assert owned(moved, crd_job.MANAGER) >= {"versions", "group", "names", "scope"}
    assert moved["spec"]["conversion"] == {"strategy": "None"}  # the API server's default again
    assert "shortNames" not in moved["spec"]["names"], moved["spec"]["names"]
    assert DROPPED not in (moved["metadata"].get("annotations") or {}), moved["metadata"]
    assert moved["metadata"]["labels"] == {"team": "e2e"}
    assert managers(added) == {crd_job.MANAGER: "Apply"}
    kept = setup.kube.get("e2e.modelplane.ai/v1", "Widget", "kept", RELEASE_NAMESPACE)
    assert kept["spec"] == {"size": "large"}

    again = run_job(setup, spec, "job-new-retry")
    assert [r.returncode for r in again] == [0, 0], again
    for name, before in ((WIDGETS, moved), (GADGETS, added)):
        after = crd(setup, name)
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]

    upgraded = helm(
        setup.workdir, "upgrade", RELEASE, f"oci://{setup.registry.host}/{REPOSITORY}/{CHART}",
        "--version", NEW, "--plain-http", "-n", RELEASE_NAMESPACE, "--skip-crds",
        kubeconfig=admin,
    )  # fmt: skip
    assert upgraded.returncode == 0, upgraded.stderr
    version = setup.kube.get("v1", "ConfigMap", f"{RELEASE}-version", RELEASE_NAMESPACE)
    assert version["data"] == {"chart": NEW}
    for name, before in ((WIDGETS, moved), (GADGETS, added)):
        after = crd(setup, name)
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_the_job_s_account_writes_only_the_crds_it_is_named_for(setup: Setup):
    """RBAC by CRD name, on the real authorizer: with the Job's token, the CRDs its chart names
    can be read, created and applied (the Job above needed nothing more), and no other CRD can be
    created, changed or read; none can be deleted."""
    spec = spec_for(setup, NEW)
    resources = crd_job.job_resources(spec)
    apply_rbac(setup, resources)
    folder = setup.workdir / "rbac"
    folder.mkdir()
    token = service_account_kubeconfig(setup, resources[crd_job.JOB], folder)
    other = yaml.safe_load((OWN_CHARTS / f"{CHART}-{NEW}" / "crds" / "gadgets.yaml").read_text())
    other["metadata"]["name"] = "sprockets.e2e.modelplane.ai"
    other["spec"]["names"] = {
        "kind": "Sprocket", "listKind": "SprocketList", "plural": "sprockets", "singular": "sprocket",
    }  # fmt: skip
    apply = ["apply", "--server-side", f"--field-manager={crd_job.MANAGER}", "-f", "-"]
    refused = kubectl(token, *apply, stdin=yaml.safe_dump(other))
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused
    assert crd(setup, other["metadata"]["name"]) is None
    setup.kube.apply(other, manager="someone-else")  # another's CRD: not the Job's to touch
    for verb in (["get", f"crd/{other['metadata']['name']}"], ["delete", f"crd/{WIDGETS}"]):
        denied = kubectl(token, *verb)
        assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied
    assert managers(crd(setup, other["metadata"]["name"])) == {"someone-else": "Apply"}
    for name in spec.crds:
        assert kubectl(token, "get", f"crd/{name}").returncode == 0


def test_a_wrong_digest_fails_the_job_and_applies_nothing(setup: Setup):
    """A digest the registry does not have fails the fetch (oras, the artifact not found); a
    digest of another version fetches a chart whose files are not the pinned ones, and the
    checksums fail the apply before kubectl runs. The CRDs stay as they were either way."""
    before = {name: crd(setup, name) for name in (WIDGETS, GADGETS)}
    unknown = "sha256:" + hashlib.sha256(b"no such chart").hexdigest()
    ran = run_job(setup, spec_for(setup, NEW, digest=unknown), "job-unknown-digest")
    assert [(r.container, r.returncode != 0) for r in ran] == [("fetch", True)], ran
    assert "not found" in ran[0].output.lower(), ran[0].output

    other = spec_for(setup, NEW, digest=setup.pushed[OLD].digest)
    ran = run_job(setup, other, "job-other-digest")
    assert [(r.container, r.returncode != 0) for r in ran] == [("fetch", False), ("apply", True)]
    assert "FAILED" in ran[1].output and "serverside-applied" not in ran[1].output, ran[1].output
    for name, was in before.items():
        now = crd(setup, name)
        assert (now or {}).get("metadata", {}).get("resourceVersion") == (was or {}).get(
            "metadata", {}
        ).get("resourceVersion")


def test_a_crd_the_pins_do_not_name_is_refused_and_fails_the_job(setup: Setup):
    """A chart file holding a CRD the function's pins do not name (so its ClusterRole does not
    name it either: the real API server would refuse the write, as the RBAC test shows): the
    program refuses the files before any write, the Job fails, and no CRD is touched."""
    files = tuple(
        replace(f, crds=()) if f.path.endswith("gadgets.yaml") else f for f in chart_files(NEW)
    )
    spec = spec_for(setup, NEW, key="e2e-crds-narrow", files=files)
    assert spec.crds == (WIDGETS,)
    before = crd(setup, GADGETS)
    ran = run_job(setup, spec, "job-refused")
    assert [(r.container, r.returncode != 0) for r in ran] == [("fetch", False), ("apply", True)]
    assert "not the pinned" in ran[1].output and "serverside-applied" not in ran[1].output, ran
    after = crd(setup, GADGETS)
    assert (after or {}).get("metadata", {}).get("resourceVersion") == (before or {}).get(
        "metadata", {}
    ).get("resourceVersion")


def container_status(container: dict, ran: Ran | None, waiting: str = "PodInitializing") -> dict:
    """A container's status as the kubelet reports it: terminated with its exit code (and, with
    FallbackToLogsOnError, its log's end as the message when it failed), or still waiting."""
    status = {"name": container["name"], "image": container["image"], "imageID": "",
              "ready": False, "restartCount": 0}  # fmt: skip
    if ran is None:
        return {**status, "state": {"waiting": {"reason": waiting}}}
    terminated: dict = {"exitCode": ran.returncode, "reason": "Completed" if not ran.returncode
                        else "Error"}  # fmt: skip
    if ran.returncode and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
        terminated["message"] = "\n".join(ran.output.splitlines()[-80:])[-4096:]
    return {**status, "state": {"terminated": terminated}}


def play_kubelet(setup: Setup, job: dict, folder: Path, timeout: float = 150) -> dict:
    """The Job, created on the workload cluster, run by the real Job controller: each pod it makes
    (unscheduled: this cluster has no node) is run here (run_pod, with the account's token) and
    its outcome reported in its status as the kubelet would, until the controller finishes the
    Job; the Job as the controller left it."""
    kube, meta = setup.kube, job["metadata"]
    kube.apply(job, manager="provider-kubernetes")
    pod_spec = job["spec"]["template"]["spec"]
    containers = [*pod_spec.get("initContainers", []), *pod_spec["containers"]]
    folder.mkdir()
    kubeconfig = service_account_kubeconfig(setup, job, folder)
    played: set[str] = set()

    def finished() -> dict | None:
        got = kube.get("batch/v1", "Job", meta["name"], meta["namespace"])
        if any(condition(got, t).get("status") == "True" for t in ("Complete", "Failed")):
            return got
        pods = kube.list("v1", "Pod", meta["namespace"], label_selector=f"job-name={meta['name']}")
        for pod in pods:
            name = pod["metadata"]["name"]
            if name in played or pod["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            played.add(name)
            ran = {
                r.container: r
                for r in run_pod(job, kubeconfig, folder / name, setup.cluster.server)
            }
            failed = any(r.returncode for r in ran.values())
            statuses = [container_status(c, ran.get(c["name"])) for c in containers]
            inits = len(pod_spec.get("initContainers", []))
            kube.patch(
                "v1", "Pod", name,
                {"status": {"phase": "Failed" if failed else "Succeeded",
                            "initContainerStatuses": statuses[:inits],
                            "containerStatuses": statuses[inits:]}},
                namespace=meta["namespace"], subresource="status", manager="kubelet",
            )  # fmt: skip
        return None

    return wait_for(finished, timeout=timeout, what=f"the Job controller to finish {meta['name']}",
                    interval=0.5)  # fmt: skip


QUICK_BACKOFF_LIMIT = 2


@pytest.fixture(scope="module")
def finished(setup: Setup) -> dict[str, dict]:
    """The composed Job run by the real Job controller, as it left it: with the right digest
    ("complete") and with a digest the registry does not have ("failed")."""
    good = crd_job.job_resources(spec_for(setup, NEW, key="e2e-crds-controller"))
    apply_rbac(setup, good)
    unknown = "sha256:" + hashlib.sha256(b"no such chart, again").hexdigest()
    bad = crd_job.job_resources(spec_for(setup, NEW, key="e2e-crds-controller", digest=unknown))
    assert bad[crd_job.JOB]["metadata"]["name"] != good[crd_job.JOB]["metadata"]["name"]
    # The composed limit's retries would take the controller's backoff (10 s doubling: over ten
    # minutes for six); two show the same path.
    bad[crd_job.JOB]["spec"]["backoffLimit"] = QUICK_BACKOFF_LIMIT
    return {
        "complete": play_kubelet(setup, good[crd_job.JOB], setup.workdir / "controller-good"),
        "failed": play_kubelet(setup, bad[crd_job.JOB], setup.workdir / "controller-bad"),
    }


def test_the_real_job_controller_completes_the_job_or_fails_it_after_its_retries(finished):
    """What provider-kubernetes reads back as the Job Object's status is the real Job
    controller's: the Job with the right digest Complete (what its Object's readiness,
    JOB_COMPLETE, waits for) after one pod; with a wrong digest Failed, BackoffLimitExceeded,
    after 1 + backoffLimit pods, each of which failed in its fetch."""
    done = finished["complete"]
    assert condition(done, "Complete").get("status") == "True", done["status"]
    assert done["status"].get("succeeded") == 1 and not done["status"].get("failed"), done
    failed = finished["failed"]
    gave_up = condition(failed, "Failed")
    assert gave_up.get("status") == "True" and gave_up["reason"] == "BackoffLimitExceeded", failed
    assert failed["status"]["failed"] == QUICK_BACKOFF_LIMIT + 1, failed["status"]
    for job in finished.values():
        name = job["metadata"]["name"]
        assert crd_job.state(job, name) != crd_job.RUNNING
    assert crd_job.state(done, done["metadata"]["name"]) == crd_job.COMPLETE
    assert "BackoffLimitExceeded" in crd_job.state(failed, failed["metadata"]["name"])


# The live release the function holds: lws on the existing example (Standard stack), at a chart
# version before the pinned one (what the function's previous release pinned stands for it).
LWS = "leader-worker-set"
LWS_RELEASE, LWS_BEFORE = f"release-{LWS}", "0.7.0"


def compose_live(job_seen: dict) -> tuple[Output, str]:
    """The function's answer for the converged existing example whose lws release is still at
    LWS_BEFORE, its CRD Job Object reporting job_seen's status (the real Job controller's, under
    the name the function gives lws's Job, as provider-kubernetes reads it back into
    status.atProvider.manifest); and that Job's name."""
    xr, classes = example("existing")
    required = {**all_classes(classes), GATEWAYS: [inference_gateway("fleet-a")]}
    schemas = {GATEWAY_SCHEMA: True}
    out = sim.converge(xr, required, None, schemas)
    job_key = crd_job_key(LWS)
    composed_job = out.resources[job_key].body["spec"]["forProvider"]["manifest"]
    assert composed_job["metadata"]["name"] == crd_job.name(crd_job.chart_crds(LWS))
    assert out.resources[LWS_RELEASE].body["spec"]["forProvider"]["chart"]["version"] != LWS_BEFORE

    def live(key: str, body: dict) -> None:
        if key == LWS_RELEASE:
            body["spec"]["forProvider"]["chart"]["version"] = LWS_BEFORE
            body["status"].setdefault("atProvider", {})["version"] = LWS_BEFORE
        if key == job_key:
            seen = {**copy.deepcopy(composed_job), "status": copy.deepcopy(job_seen["status"])}
            body["status"].setdefault("atProvider", {})["manifest"] = seen
            complete = condition(job_seen, "Complete").get("status") == "True"
            body["status"]["conditions"] = [
                {"type": "Ready", "status": str(complete), "reason": "Available" if complete
                 else "Unavailable"},
                {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
            ]  # fmt: skip

    observed = sim.observed_from(out, live)
    again = compose_cluster(xr, sim.answered(required, out), observed, schemas)
    return again, composed_job["metadata"]["name"]


def test_a_failed_job_holds_the_live_release_and_the_xr_says_why(finished):
    """The function on a live cluster's observed state: while lws's CRD Job reports what the
    real Job controller wrote for a Job whose fetch failed (Failed, BackoffLimitExceeded), the
    release stays at the chart version it runs and BackendReady names the Job and gives the
    controller's reason; once the Job reports Complete, the release moves to the pinned version,
    installed without its crds/ (skipCRDs)."""
    held, job_name = compose_live(finished["failed"])
    chart = held.resources[LWS_RELEASE].body["spec"]["forProvider"]["chart"]
    assert chart["version"] == LWS_BEFORE, chart
    [backend] = [c for c in held.conditions if c.type == "BackendReady"]
    assert not backend.status, backend
    assert job_name in backend.message and "BackoffLimitExceeded" in backend.message, backend

    moved, _ = compose_live(finished["complete"])
    release = moved.resources[LWS_RELEASE].body["spec"]["forProvider"]
    assert release["chart"]["version"] == CHARTS[LWS].version
    assert release["skipCRDs"] is True


@pytest.fixture(scope="module")
def provider_processes(control_plane: ControlPlane):
    """The real provider-helm v1.3.0 (and provider-kubernetes) against the e2e control plane."""
    with real_providers.Providers(control_plane) as running:
        yield running


def test_the_real_provider_helm_moves_the_release_after_the_job_without_its_crds(
    setup: Setup, kube: Kube, provider_processes
):
    """The same move with the real provider-helm v1.3.0 on a workload cluster of its own: a
    Release of the chart at 0.1.0, pulled by provider-helm from the local registry (plainHTTP),
    installs Widget from crds/; the Job for 0.2.0 takes it over and creates Gadget; then the
    Release, moved to 0.2.0 with skipCRDs as the function composes it once the Job is Complete,
    is upgraded by provider-helm, the CRDs left exactly as the Job applied them."""
    name = "e2e-crd-job"
    here = setup.workdir / "provider-helm"
    here.mkdir()
    chart = {
        "name": CHART,
        "repository": f"oci://{setup.registry.host}/{REPOSITORY}",
        "version": OLD,
    }
    with WorkloadCluster(here / "workload", setup.etcd, prefix="/crd-job-helm") as wl:
        other = replace(setup, cluster=wl, workdir=here)
        release = standalone_release(
            kube, wl, name, {"chart": chart, "namespace": RELEASE_NAMESPACE, "plainHTTP": True}
        )
        deployed = functools.partial(release_deployed, kube, name)
        status = functools.partial(release_status, kube, name, provider_processes)
        try:
            wait_for(lambda: deployed(1), timeout=300, what="0.1.0 installed", describe=status)
            helms = crd(other, WIDGETS)
            assert helms is not None and crd(other, GADGETS) is None
            # One manager, Helm's Create inside provider-helm, an Update named after the
            # process (Helm's getManagedFieldsManager: its binary's name, which provider-helm's
            # image gives as the e2e does), one of those the Job takes over from.
            assert managers(helms) == {"provider-helm": "Update"}, helms["metadata"]
            assert set(managers(helms)) <= set(crd_job.HELM_MANAGERS)

            ran = run_job(other, spec_for(other, NEW), "job")
            assert [r.returncode for r in ran] == [0, 0], ran
            moved = {n: crd(other, n) for n in (WIDGETS, GADGETS)}
            assert all(managers(c) == {crd_job.MANAGER: "Apply"} for c in moved.values())

            kube.patch(
                release["apiVersion"], release["kind"], name,
                {"spec": {"forProvider": {"chart": {**chart, "version": NEW}, "skipCRDs": True}}},
                namespace=SYSTEM_NAMESPACE,
            )  # fmt: skip
            wait_for(lambda: deployed(2), timeout=300, what="the upgrade to 0.2.0", describe=status)
            version = wl.kube.get("v1", "ConfigMap", f"{name}-version", RELEASE_NAMESPACE)
            assert version["data"] == {"chart": NEW}
            for crd_name, before in moved.items():
                after = crd(other, crd_name)
                assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        finally:
            remove_standalone_release(kube, name)


def test_the_e2e_runs_the_oras_the_job_s_image_pins():
    """tests/tools/oras builds the oras of IMAGES["oras"] (its tag), so the fetch step runs the
    client the Job runs."""
    go_mod = (ROOT / "tests" / "tools" / "oras" / "go.mod").read_text()
    [pinned] = re.findall(rf"^require {re.escape(ORAS_MODULE)} (v\S+)$", go_mod, re.M)
    assert IMAGES["oras"].split("@")[0].rsplit(":", 1)[1] == pinned
