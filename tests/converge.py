"""Convergence the way Crossplane runs it: `crossplane render` pass after pass against the running
function, feeding back as observed what the providers would report, until nothing changes.

Each pass renders the XR (with the status the previous pass produced) against the observed
composed resources: the previous pass's desired resources as tests/sim/providers.py says their
providers would report them (Ready, ids, ARNs, connection secrets). The loop stops when the desired
set and the XR status are the same two passes running.
"""

import copy
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.sim.providers import World, observe
from tests.tools.render import COMPOSITION, FUNCTIONS

SCHEMAS = Path(__file__).resolve().parent / "sim" / "schemas"

XRD = Path(__file__).resolve().parent.parent / "apis" / "inferenceclusters" / "definition.yaml"
RESOURCE_NAME = "crossplane.io/composition-resource-name"


@dataclass
class Pass:
    xr: dict
    composed: dict[str, dict]
    results: list[dict]

    def condition(self, type_: str) -> dict:
        return next(c for c in self.xr["status"]["conditions"] if c["type"] == type_)

    @property
    def ready(self) -> bool:
        return self.condition("Ready")["status"] == "True"

    def warnings(self) -> list[str]:
        return [r["message"] for r in self.results if r["severity"] == "SEVERITY_WARNING"]


@dataclass
class Renderer:
    """Runs `crossplane render` for one XR against the function at target."""

    crossplane: str
    target: str
    workdir: Path
    composition: Path = COMPOSITION
    # OpenAPI documents of the kinds installed beside ours (the InferenceGateway), or None.
    schemas: Path | None = None
    calls: int = field(default=0)

    def render(self, xr: dict, required: list[dict], observed: list[dict] | None = None) -> Pass:
        self.calls += 1
        folder = self.workdir / f"pass-{self.calls}"
        folder.mkdir(parents=True)
        (folder / "xr.yaml").write_text(yaml.safe_dump(xr))
        (folder / "required.yaml").write_text(yaml.safe_dump_all(required))
        args = [
            self.crossplane,
            "render",
            str(folder / "xr.yaml"),
            str(self.composition),
            str(FUNCTIONS),
            f"--required-resources={folder / 'required.yaml'}",
            f"--xrd={XRD}",
            "--include-function-results",
            "--include-full-xr",
            f"--function-annotations=render.crossplane.io/runtime-development-target={self.target}",
        ]
        if self.schemas is not None:
            args.append(f"--required-schemas={self.schemas}")
        if observed:
            (folder / "observed.yaml").write_text(yaml.safe_dump_all(observed))
            args.append(f"--observed-resources={folder / 'observed.yaml'}")
        proc = subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)
        assert proc.returncode == 0, f"crossplane render failed:\n{proc.stderr}"
        (folder / "rendered.yaml").write_text(proc.stdout)  # what the secrets scan reads
        docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
        return split(docs)


def split(docs: list[dict]) -> Pass:
    results = [d for d in docs if d["kind"] == "Result"]
    composed = {
        d["metadata"]["annotations"][RESOURCE_NAME]: d for d in docs[1:] if d["kind"] != "Result"
    }
    return Pass(xr=docs[0], composed=composed, results=results)


def observed_as_provider_reports(composed: dict[str, dict], world: World) -> list[dict]:
    """The composed resources as their providers would report them after reconciling."""
    out = []
    for body in composed.values():
        seen = copy.deepcopy(body)
        report = observe(body, world)
        seen["status"] = report.status
        if report.external_name:
            seen["metadata"].setdefault("annotations", {})["crossplane.io/external-name"] = (
                report.external_name
            )
        out.append(seen)
    return out


def next_xr(xr: dict, previous: Pass | None) -> dict:
    """The XR as the next reconcile observes it: its spec, and the status last written."""
    out = copy.deepcopy(xr)
    if previous is not None and "status" in previous.xr:
        out["status"] = copy.deepcopy(previous.xr["status"])
    return out


def desired_state(p: Pass) -> tuple:
    return (yaml.safe_dump(p.composed, sort_keys=True), yaml.safe_dump(p.xr.get("status")))


def converge(
    renderer: Renderer,
    xr: dict,
    required: list[dict],
    world: World | None = None,
    *,
    start: Pass | None = None,
    max_passes: int = 20,
) -> list[Pass]:
    """Render until the desired set and status stop changing; every pass is returned."""
    world = world or World()
    required = required + (world.inference_gateways or [])
    passes: list[Pass] = []
    previous = start
    for _ in range(max_passes):
        observed = observed_as_provider_reports(previous.composed, world) if previous else None
        current = renderer.render(next_xr(xr, previous), required, observed)
        passes.append(current)
        if previous is not None and desired_state(previous) == desired_state(current):
            return passes
        previous = current
    raise AssertionError(f"no convergence in {max_passes} passes")
