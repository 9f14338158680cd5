"""Releases a live fleet survives: what the newest release converged, this code reconciles.

The newest released commit in CHANGELOG.md is checked out beside the clone (`git archive`), and its
own code converges every example and DRAWN generated clusters with its own provider model
(tests/tools/release_converge.py in a process of its own). This code then reconciles each from
that live state until it settles. On every pass: nothing the release composed is gone, and no
field a provider cannot change in place (function/forcenew.py) differs from the live resource,
unless the entry at hand names it ("Removed on upgrade", "Replaced on upgrade"). The in-place
changes are printed for review.
"""

import collections
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from function import forcenew
from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from function.output import Output
from tests.builders import all_classes, example, provider_config, provider_configs, world_for
from tests.conftest import ROOT
from tests.releases import Release, latest_released, releases
from tests.sim.providers import World
from tests.sim.workload import inference_gateway
from tests.strategies import clusters
from tests.unit import sim

DRAWN = int(os.environ.get("UPGRADE_DRAWN", "100"))
# Every folder of examples/ with an InferenceCluster (quickstart/ and smoke/ hold other manifests).
EXAMPLES = sorted(p.parent.name for p in (ROOT / "examples").glob("*/inferencecluster.yaml"))
SCHEMAS = {
    "inference-gateway-kind": True,
    "model-replicas-kind": True,
    "model-routes-kind": True,
    "model-caches-kind": True,
}
FLEET = [inference_gateway("fleet-a")]
MAX_PASSES = 30


@dataclasses.dataclass
class Case:
    name: str
    xr: dict
    required: dict[str, list[dict]]
    world: World

    def wire(self) -> dict:
        return {
            "xr": self.xr,
            "required": self.required,
            "schemas": SCHEMAS,
            "world": dataclasses.asdict(self.world),
        }


def case(name: str, xr: dict, classes: list[dict], configs: list[dict]) -> Case:
    required = all_classes(classes) | {"inference-gateways": FLEET}
    required |= {"model-replicas": [], "model-routes": [], "model-caches": []}
    if configs:
        required["cloud-provider-config"] = configs
    world = world_for(xr)
    return Case(name, xr, required, dataclasses.replace(world, inference_gateways=FLEET))


def drawn_clusters(count: int) -> list[tuple[dict, list[dict]]]:
    """count generated clusters, the same ones every run."""
    found: list[tuple[dict, list[dict]]] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(clusters())
    def collect(drawn):
        found.append(drawn)

    collect()
    return found


def all_cases() -> list[Case]:
    out = []
    for name in EXAMPLES:
        xr, classes = example(name)
        out.append(case(name, xr, classes, provider_configs(name)))
    for i, (xr, classes) in enumerate(drawn_clusters(DRAWN)):
        config = provider_config(xr)
        out.append(case(f"drawn-{i}", xr, classes, [config] if config else []))
    return out


@pytest.fixture(scope="module")
def previous(tmp_path_factory) -> tuple[Release, Path]:
    """The newest released commit, checked out beside the clone."""
    release = latest_released()
    folder = tmp_path_factory.mktemp(f"v{release.version}")
    present = subprocess.run(
        ["git", "cat-file", "-e", f"{release.commit}^{{commit}}"], cwd=ROOT, check=False
    )
    if present.returncode != 0:
        pytest.fail(f"v{release.version}'s commit {release.commit} is not in this clone")
    archive = subprocess.run(
        ["git", "archive", "--format=tar", release.commit],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True, timeout=120)
    fetch = folder / "hack" / "crds" / "fetch.sh"
    if fetch.exists():
        subprocess.run([str(fetch)], check=True, timeout=600)
    return release, folder


def converged_by(folder: Path, cases: list[Case]) -> list[dict]:
    """Each case converged by the release checked out in folder."""
    env = {**os.environ, "PYTHONPATH": str(folder)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "tools" / "release_converge.py")],
        input=json.dumps([c.wire() for c in cases]),
        capture_output=True,
        text=True,
        cwd=folder,
        env=env,
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"function from {folder}" in proc.stderr, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def reconcile(c: Case, live: dict) -> list[Output]:
    """This code from the release's live state, with the providers reporting, until it settles."""
    resources = {k: ObservedResource(b) for k, b in live["observed"].items()}
    out = compose_cluster(c.xr, c.required, Observed(resources, live["status"]), SCHEMAS)
    passes = [out]
    for _ in range(MAX_PASSES):
        again = compose_cluster(c.xr, c.required, sim.reported(out, c.world), SCHEMAS)
        passes.append(again)
        if again.resources == out.resources and again.status == out.status:
            return passes
        out = again
    raise AssertionError(f"{c.name}: no convergence after the upgrade in {MAX_PASSES} passes")


def _at(body: dict, path: tuple[str, ...]):
    node = body.get("spec", {}).get("forProvider", {})
    for step in path:
        if not isinstance(node, dict):
            return None
        node = node.get(step)
    return node


def upgrade_problems(name: str, live: dict, passes: list[Output], entry: Release) -> list[str]:
    """What a pass removes or replaces that the entry at hand does not name."""
    problems = []
    for n, out in enumerate(passes, 1):
        for key in sorted(set(live["resources"]) - set(out.resources)):
            if not entry.allows("Removed on upgrade", key):
                problems.append(f"{name}: pass {n} removes {key}")
        for key in sorted(set(live["resources"]) & set(out.resources)):
            seen, body = live["observed"][key], out.resources[key].body
            frozen = forcenew.FORCE_NEW.get((body["apiVersion"].split("/")[0], body["kind"]), ())
            for field in frozen:
                dotted = ".".join(field.path)
                was, now = _at(seen, field.path), _at(body, field.path)
                allowed = entry.allows("Replaced on upgrade", f"{key}:{dotted}")
                if was is not None and was != now and not allowed:
                    problems.append(f"{name}: pass {n} changes {key} {dotted}: {was} -> {now}")
    return problems


def in_place_changes(live: dict, final: Output) -> set[tuple[str, str]]:
    """(kind, field path) of every field the upgrade changes on a resource it keeps."""
    found: set[tuple[str, str]] = set()
    for key in sorted(set(live["resources"]) & set(final.resources)):
        body = final.resources[key].body
        kind = f"{body['apiVersion']} {body['kind']}"
        found |= {(kind, p) for p in sim.differing(live["resources"][key], body)}
    return found


def test_every_cluster_the_newest_release_converged_survives_this_code(previous, capsys):
    release, folder = previous
    entry = releases()[0]
    cases = all_cases()
    answers = converged_by(folder, cases)
    failed = {c.name: a["error"] for c, a in zip(cases, answers, strict=True) if "error" in a}
    assert not {n: e for n, e in failed.items() if not n.startswith("drawn-")}, failed
    # A drawn cluster the release could not compose is no live state to upgrade.
    assert len(failed) <= DRAWN // 10, failed
    problems: list[str] = []
    changes: collections.Counter = collections.Counter()
    for c, live in zip(cases, answers, strict=True):
        if "error" in live:
            continue
        passes = reconcile(c, live)
        problems += upgrade_problems(c.name, live, passes, entry)
        changes.update(in_place_changes(live, passes[-1]))
    with capsys.disabled():
        print(
            f"\nupgrade v{release.version} -> v{entry.version}: {len(cases) - len(failed)} clusters"
        )
        print(f"in-place changes ({len(changes)} fields):")
        for (kind, path), count in sorted(changes.items()):
            print(f"  {kind} {path}: {count} clusters")
    assert not problems, "\n".join(problems[:50])


# --- the checks themselves ------------------------------------------------------------------------

ENTRY = """## v9.9.9 (unreleased)
### Removed on upgrade
- `watch-*`: an Observe-only watcher another replaces.
### Replaced on upgrade
- `nodepool-a:nodeConfig.guestAccelerator`
"""


def _pool(accelerator: str) -> dict:
    return {
        "apiVersion": "container.gcp.m.upbound.io/v1beta1",
        "kind": "NodePool",
        "spec": {"forProvider": {"nodeConfig": {"guestAccelerator": [{"type": accelerator}]}}},
    }


def test_the_checks_catch_a_removal_and_a_replacement_the_entry_does_not_name():
    (entry,) = releases(ENTRY)
    live = {
        "resources": {k: _pool("l4") for k in ("nodepool-a", "nodepool-b", "watch-x", "gone")},
        "observed": {k: _pool("l4") for k in ("nodepool-a", "nodepool-b", "watch-x", "gone")},
    }
    from function.output import Desired  # noqa: PLC0415

    out = Output(resources={k: Desired(_pool("h100")) for k in ("nodepool-a", "nodepool-b")})
    problems = upgrade_problems("c", live, [out], entry)
    assert problems == [
        "c: pass 1 removes gone",
        "c: pass 1 changes nodepool-b nodeConfig.guestAccelerator: [{'type': 'l4'}] -> "
        "[{'type': 'h100'}]",
    ]
    assert in_place_changes(live, out) == {
        (
            "container.gcp.m.upbound.io/v1beta1 NodePool",
            "spec.forProvider.nodeConfig.guestAccelerator",
        )
    }


def test_the_changelog_names_this_version_and_its_releases_commits():
    from function.__version__ import __version__  # noqa: PLC0415

    entries = releases()
    assert entries[0].version == __version__
    assert [e.version for e in entries] == sorted(
        (e.version for e in entries), key=lambda v: tuple(map(int, v.split("."))), reverse=True
    )
    released = [e for e in entries if e.commit]
    assert released and all(e.commit for e in entries[1:])
    for e in released:
        proc = subprocess.run(
            ["git", "cat-file", "-e", f"{e.commit}^{{commit}}"], cwd=ROOT, check=False
        )
        assert proc.returncode == 0, f"v{e.version}: {e.commit} not in this clone"
