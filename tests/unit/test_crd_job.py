"""The CRD Job (function/serving/crd_job.py): what it applies is the published chart's crds/, what
it may do is bounded by CRD name, its script does what it says, and the release waits for it."""

import copy
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
import yaml

from function.clusters.base import as_desired
from function.compose import compose_cluster
from function.failures import DOES_NOT_EXIST
from function.inputs import Observed, ObservedResource
from function.serving import crd_job, gateway_api
from function.serving.components import COMPONENTS, crd_job_key
from function.serving.programs import apply_crds
from function.serving.stack import gateway_api_crds_ours
from function.versions import CHART_CRD_FILES, CHART_DIGESTS, CHARTS, IMAGE_DIGESTS, unpinned
from tests.charts import charts_dir
from tests.sim.workload import inference_gateway
from tests.unit.sim import reported
from tests.unit.test_serving import INSTALLED, condition, converged, required

JOB_CHARTS = sorted(CHART_CRD_FILES)


def _shared(path: str, key: str) -> Path:
    """Where a path inside the chart archive is in ../shared/charts (the chart unpacked)."""
    chart = CHARTS[key]
    top, _, rest = path.partition("/")
    assert top == chart.name, path
    return charts_dir() / f"{chart.name}-{chart.version}" / rest


@pytest.mark.parametrize("key", JOB_CHARTS)
def test_the_pinned_files_are_the_published_chart_s_crds(key):
    """Each file's sha256 and CRD names are the published chart's, and no file of its crds/ is
    left out (a new version's added CRD file fails here until it is pinned)."""
    spec = crd_job.chart_crds(key)
    for f in spec.files:
        data = _shared(f.path, key).read_bytes()
        assert hashlib.sha256(data).hexdigest() == f.sha256, f.path
        names = [d["metadata"]["name"] for d in yaml.safe_load_all(data) if d]
        assert tuple(names) == f.crds, f.path
    root = charts_dir() / f"{CHARTS[key].name}-{CHARTS[key].version}"
    assert {str(p.relative_to(root)) for p in crd_files(root)} == {
        f.path.partition("/")[2] for f in spec.files
    }


def crd_files(root: Path) -> list[Path]:
    """Every file Helm reads as a CRD in a chart tree: under crds/ of the chart or a subchart
    (a folder with a Chart.yaml), .yaml, .yml or .json, at any depth."""
    return sorted(
        p
        for chart in root.rglob("Chart.yaml")
        for p in (chart.parent / "crds").rglob("*")
        if p.is_file() and p.suffix in (".yaml", ".yml", ".json")
    )


def test_gateway_helm_carries_twenty_crds_twelve_of_them_gateway_api():
    spec = crd_job.chart_crds("envoy-gateway")
    assert len(spec.crds) == 20
    own = crd_job.chart_crds("envoy-gateway", gateway_api=False)
    assert len(own.crds) == 8
    assert all(c.endswith(".gateway.envoyproxy.io") for c in own.crds)
    assert gateway_api.SOUGHT.name in spec.crds and gateway_api.SOUGHT.name not in own.crds
    # Another selection is another Job (a Job's template is immutable), under the same account.
    assert crd_job.name(spec) != crd_job.name(own)
    assert crd_job.rbac_name(spec) == crd_job.rbac_name(own)


@pytest.mark.parametrize("key", JOB_CHARTS)
def test_what_the_job_may_do_is_bounded_by_crd_name(key):
    spec = crd_job.chart_crds(key)
    made = crd_job.job_resources(spec)
    [rule] = made[crd_job.CLUSTER_ROLE]["rules"]
    assert rule["resources"] == ["customresourcedefinitions"]
    assert rule["resourceNames"] == list(spec.crds)
    # A server-side apply that creates is authorised as create with the object's name
    # (kube-apiserver handlers/patch.go), so resourceNames bound it; never delete.
    assert set(rule["verbs"]) == {"get", "create", "patch"}  # no list or watch: it reads by name
    binding = made[crd_job.BINDING]
    assert binding["roleRef"]["name"] == made[crd_job.CLUSTER_ROLE]["metadata"]["name"]
    assert binding["subjects"][0]["name"] == made[crd_job.SERVICE_ACCOUNT]["metadata"]["name"]


@pytest.mark.parametrize("key", JOB_CHARTS)
def test_the_job_is_restricted_and_never_made_again_by_itself(key):
    spec = crd_job.chart_crds(key)
    job = crd_job.job_resources(spec)[crd_job.JOB]
    assert "ttlSecondsAfterFinished" not in job["spec"]  # provider-kubernetes would re-create it
    assert job["spec"]["backoffLimit"] == crd_job.BACKOFF_LIMIT
    # A pod a drain evicts is no failure (the stack SRE review: evictions used up the retries).
    assert job["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"] == [
        {"type": "DisruptionTarget"}
    ]
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert "tolerations" not in pod
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in pod["initContainers"] + pod["containers"]:
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["resources"]["requests"]
    [fetch] = pod["initContainers"]
    assert fetch["image"].startswith("ghcr.io/oras-project/oras:")
    assert fetch["args"][-2] == spec.source
    assert len(job["metadata"]["name"]) <= 63


def test_a_pinned_digest_is_what_oras_fetches():
    spec = crd_job.chart_crds("leader-worker-set")
    assert spec.source == "registry.k8s.io/lws/charts/lws:v0.8.0"
    pinned = crd_job.ChartCRDs(**{**spec.__dict__, "digest": "sha256:" + "a" * 64})
    assert pinned.source == "registry.k8s.io/lws/charts/lws@sha256:" + "a" * 64
    assert crd_job.name(pinned) != crd_job.name(spec)


def test_any_change_of_the_pod_is_a_new_job(monkeypatch):
    """A Job's pod template is immutable: pinning an image's digest names another Job."""
    spec = crd_job.chart_crds("leader-worker-set")
    before = crd_job.name(spec)
    monkeypatch.setitem(IMAGE_DIGESTS, "python", "sha256:" + "b" * 64)
    assert crd_job.name(spec) != before
    job = crd_job.job_resources(spec)[crd_job.JOB]
    [apply] = job["spec"]["template"]["spec"]["containers"]
    assert apply["image"].endswith("@sha256:" + "b" * 64)


def test_what_is_not_pinned_by_digest_is_listed_for_the_release():
    """`make release-pins` refuses a release while any of these is None: the list says which."""
    left = unpinned()
    assert [f"chart {k}" for k, d in CHART_DIGESTS.items() if d is None] == [
        x for x in left if x.startswith("chart ")
    ]
    assert [f"image {k}" for k, d in IMAGE_DIGESTS.items() if d is None] == [
        x for x in left if x.startswith("image ")
    ]
    assert set(CHART_DIGESTS) == set(CHART_CRD_FILES)
    makefile = (Path(__file__).parents[2] / "Makefile").read_text()
    assert "release-pins:" in makefile and "unpinned()" in makefile


# --- the apply program's reading of the chart, run against a layout as oras writes it -----------


def _layout(work: Path, key: str, tamper: str | None = None) -> None:
    """An OCI layout of the chart (as `oras cp --to-oci-layout` writes it) from ../shared/charts;
    tamper: a file inside the archive whose bytes are changed."""
    chart = CHARTS[key]
    root = charts_dir() / f"{chart.name}-{chart.version}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in sorted(root.rglob("*")):
            if p.is_file():
                arc = f"{chart.name}/{p.relative_to(root)}"
                data = p.read_bytes() + (b"\n# changed\n" if arc == tamper else b"")
                info = tarfile.TarInfo(arc)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    blobs = work / "chart" / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return f"sha256:{digest}"

    config = put(b"{}")
    layer = put(buf.getvalue())
    manifest = put(
        json.dumps(
            {
                "schemaVersion": 2,
                "config": {
                    "mediaType": "application/vnd.cncf.helm.config.v1+json",
                    "digest": config,
                },
                "layers": [{"mediaType": crd_job.HELM_LAYER, "digest": layer}],
            }
        ).encode()
    )
    (work / "chart" / "index.json").write_text(json.dumps({"manifests": [{"digest": manifest}]}))


def _files(tmp_path: Path, key: str, tamper: str | None = None) -> tuple[list[str], str]:
    """What the apply program reads of the chart's layout: the checked files, or why it stopped."""
    work = tmp_path / "work"
    _layout(work, key, tamper)
    env = crd_job.apply_env(crd_job.chart_crds(key))
    try:
        return apply_crds.chart_files(str(work), env["HELM_LAYER"], env["CHECKSUMS"]), ""
    except SystemExit as stopped:
        return [], str(stopped.code)


@pytest.mark.parametrize("key", JOB_CHARTS)
def test_the_program_reads_the_checked_files_and_each_pinned_crd_in_them(tmp_path, key):
    """The published chart's files (../shared/charts), their documents named as pinned: the
    program applies each by that name, and refuses files that hold another set."""
    spec = crd_job.chart_crds(key)
    files, stopped = _files(tmp_path, key)
    assert not stopped and len(files) == len(spec.files)
    names = sorted(name for text in files for name, _ in apply_crds.documents(text))
    assert names == list(spec.crds)


def test_a_file_that_is_not_the_pinned_one_is_never_applied(tmp_path):
    spec = crd_job.chart_crds("leader-worker-set")
    files, stopped = _files(tmp_path, "leader-worker-set", tamper=spec.files[0].path)
    assert files == [] and "FAILED" in stopped


def test_the_job_runs_the_program_with_its_api_client_and_no_shell():
    """The apply container runs the program as composed: the API client, then the program."""
    (container,) = crd_job.job(crd_job.chart_crds("leader-worker-set"), "ns")["spec"]["template"][
        "spec"
    ]["containers"]
    assert container["command"][:2] == ["/usr/bin/python3", "-c"]
    program = container["command"][2]
    assert "class Api:" in program and "def take_over(" in program
    assert "from function" not in program
    compile(program, "apply_crds", "exec")


# --- the release waits for its Job ----------------------------------------------------------------

LWS = "release-leader-worker-set"
LWS_JOB = crd_job_key("leader-worker-set")


def _live(out, version: str, job: dict | None) -> Observed:
    """A cluster whose lws release runs `version`, and whose Job Object observes `job`."""
    resources = {}
    for key, seen in reported(out).resources.items():
        body = copy.deepcopy(seen.body)
        if key == LWS:
            body["spec"]["forProvider"]["chart"]["version"] = version
            body["status"]["atProvider"]["version"] = version
        if key == LWS_JOB:
            body["status"]["atProvider"]["manifest"] = job
        resources[key] = ObservedResource(body)
    return Observed(resources=resources, status=out.status)


def _job(out, conditions: list[dict], name: str | None = None) -> dict:
    job = copy.deepcopy(out.resources[LWS_JOB].body["spec"]["forProvider"]["manifest"])
    if name:
        job["metadata"]["name"] = name
    job["status"] = {"conditions": conditions}
    return job


def test_the_release_is_installed_after_its_job_and_skips_its_crds():
    xr, classes, out = converged()
    lws = next(c for c in COMPONENTS if c.key == "leader-worker-set")
    assert lws.crd_job == LWS_JOB and LWS_JOB not in lws.after  # no Usage: deletion as before
    # Not installed while its Job runs.
    req = required(classes, [inference_gateway("fleet-a")])
    first = _live(out, "v0.8.0", _job(out, []))
    del first.resources[LWS]
    job = first.resources[LWS_JOB].body["status"]
    job["conditions"] = [c for c in job["conditions"] if c["type"] != "Ready"] + [
        {"type": "Ready", "status": "False", "reason": "Unavailable"}
    ]
    waiting = compose_cluster(xr, req, first, INSTALLED)
    assert LWS not in waiting.resources
    assert LWS_JOB in condition(waiting, "BackendReady").message
    assert out.resources[LWS].body["spec"]["forProvider"]["skipCRDs"] is True
    job = out.resources[LWS_JOB].body["spec"]
    assert job["readiness"]["celQuery"] == crd_job.JOB_COMPLETE


def test_a_chart_bump_waits_for_its_job_and_a_failed_one_says_why():
    xr, classes, out = converged()
    req = required(classes, [inference_gateway("fleet-a")])
    # The old version's Job is what the Object still observes: the release stays.
    old = _live(out, "v0.7.0", _job(out, [{"type": "Complete", "status": "True"}], "mp-crds-old"))
    held = compose_cluster(xr, req, old, INSTALLED)
    assert held.resources[LWS].body == as_desired(old.resources[LWS].body)
    backend = condition(held, "BackendReady")
    assert backend.status is False
    assert "the CRDs of lws v0.8.0" in backend.message
    # The new Job failed: held still, in the Job's words.
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit",
    }
    broken = compose_cluster(xr, req, _live(out, "v0.7.0", _job(out, [failed])), INSTALLED)
    assert broken.resources[LWS].body["spec"]["forProvider"]["chart"]["version"] == "v0.7.0"
    message = condition(broken, "BackendReady").message
    assert "BackoffLimitExceeded" in message
    # Complete: the release moves.
    done = _live(out, "v0.7.0", _job(out, [{"type": "Complete", "status": "True"}]))
    moved = compose_cluster(xr, req, done, INSTALLED)
    assert moved.resources[LWS].body == out.resources[LWS].body


def test_a_failed_job_of_the_version_running_is_a_warning_not_a_hold():
    xr, classes, out = converged()
    req = required(classes, [inference_gateway("fleet-a")])
    failed = {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}
    again = compose_cluster(xr, req, _live(out, "v0.8.0", _job(out, [failed])), INSTALLED)
    assert again.resources[LWS].body == out.resources[LWS].body
    [warning] = [r for r in again.results if r.reason == "CRDJobFailed"]
    assert "DeadlineExceeded" in warning.message


def _gateway_crd() -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": gateway_api.SOUGHT.name},
    }


def _detector(found: dict | None) -> ObservedResource:
    body = {
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
        "kind": "Object",
        "metadata": {"name": "x"},
        "spec": {},
        "status": {"atProvider": {"manifest": found}} if found else {},
    }
    if found is None:
        body["status"] = {
            "conditions": [
                {
                    "type": "Synced",
                    "status": "False",
                    "reason": "ReconcileError",
                    "message": f"cannot observe: {DOES_NOT_EXIST}",
                }
            ]
        }
    return ObservedResource(body)


def test_on_an_existing_cluster_another_s_gateway_api_crds_are_never_applied_over():
    # Provisioned: always the chart's whole crds/.
    assert gateway_api_crds_ours("EKS", {}) is True
    # Existing, nothing known (a live cluster converged before the detector): left alone.
    assert gateway_api_crds_ours("Existing", {}) is False
    # Found someone's: left alone; found none: the function's to apply.
    found = {gateway_api.KEY: _detector(_gateway_crd())}
    assert gateway_api_crds_ours("Existing", found) is False
    absent = {gateway_api.KEY: _detector(None)}
    assert gateway_api_crds_ours("Existing", absent) is True
    # Once a Job applied them, they stay the function's (the detector then finds them).
    ours = crd_job.job_resources(crd_job.chart_crds("envoy-gateway"))[crd_job.JOB]
    theirs = crd_job.job_resources(crd_job.chart_crds("envoy-gateway", gateway_api=False))
    key = crd_job_key("envoy-gateway")

    def job_object(manifest):
        return ObservedResource({"spec": {"forProvider": {"manifest": manifest}}})

    assert gateway_api_crds_ours("Existing", {**found, key: job_object(ours)}) is True
    assert gateway_api_crds_ours("Existing", {key: job_object(theirs[crd_job.JOB])}) is False
