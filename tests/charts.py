"""The real Helm charts the function installs, rendered with the real Helm.

Every Release the function composes names a chart (name, repository, version) and the values it
installs with. ../shared/charts holds each chart unpacked as its project publishes it, one folder
`<name>-<version>` (CHARTS_DIR, read in place); `helm template` (Helm v3.21.1, the version the
e2e's provider-helm v1.3.0 links, built by make into .tools/bin) renders a Release's manifests
from it exactly as provider-helm would install them, CRDs included; Helm v4.2.3 (provider-helm
v1.4.0's) must render the same.

The Releases come from the converged golden files (tests/golden/*-converged.yaml: every example
run to a Ready cluster), which tests/test_clouds.py and tests/test_render_examples.py keep equal to
what the function composes.
"""

import functools
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.golden import GOLDEN

ROOT = Path(__file__).resolve().parent.parent
# What provider-helm is told to install on: the oldest Kubernetes the API admits is 1.34, the
# charts' SOURCES.md renders at 1.35.0; every chart here accepts both.
KUBE_VERSION = "1.35.0"
# Charts with no public source to reproduce them from (../shared/charts/SOURCES.md): named in the
# docs/testing.md as unchecked.
UNCHECKED = frozenset({"csi-mounted-fs-path"})


def charts_dir() -> Path:
    path = Path(os.environ.get("CHARTS_DIR") or ROOT.parent / "shared" / "charts").resolve()
    if not (path / "SOURCES.md").is_file():
        pytest.fail(f"charts not found at {path}; set CHARTS_DIR to ../shared/charts")
    return path


def helm_bin(env: str = "HELM", name: str = "helm") -> str:
    """Helm v3.21.1 (what the e2e's provider-helm v1.3.0 links); HELM4/helm4 gives v4.2.3 (what
    provider-helm v1.4.0, the Configuration's dependency, links)."""
    path = os.environ.get(env) or str(ROOT / ".tools" / "bin" / name)
    if not (Path(path).is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"{name} not found at {path}; run `make setup`")
    return path


def converged_examples() -> list[str]:
    return sorted(p.name.removesuffix("-converged.yaml") for p in GOLDEN.glob("*-converged.yaml"))


@functools.cache
def converged(example: str) -> tuple[dict, ...]:
    text = (GOLDEN / f"{example}-converged.yaml").read_text()
    return tuple(d for d in yaml.safe_load_all(text) if d)


def releases(example: str) -> list[dict]:
    """Every provider-helm Release an example's converged cluster composes."""
    return [d for d in converged(example) if d["kind"] == "Release"]


def release_name(release: dict) -> str:
    return release["metadata"]["annotations"]["crossplane.io/external-name"]


def chart_of(release: dict) -> dict:
    return release["spec"]["forProvider"]["chart"]


def chart_path(name: str, version: str) -> Path | None:
    """The published chart at exactly this version, or None."""
    path = charts_dir() / f"{name}-{version}"
    meta = path / "Chart.yaml"
    if not meta.is_file():
        return None
    chart = yaml.safe_load(meta.read_text())
    return path if (chart["name"], chart["version"]) == (name, version) else None


def checked(release: dict) -> bool:
    return chart_of(release)["name"] not in UNCHECKED


@functools.cache
def _template(
    path: Path, name: str, namespace: str, values: str, helm: str, crds: bool = True
) -> tuple[dict, ...]:
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        f.write(values)
        f.flush()
        proc = subprocess.run(
            [
                helm,
                "template",
                name,
                str(path),
                "--namespace",
                namespace,
                "--kube-version",
                KUBE_VERSION,
                *(["--include-crds"] if crds else []),
                "-f",
                f.name,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
    assert proc.returncode == 0, f"helm template {name} {path.name}:\n{proc.stderr}"
    return tuple(d for d in yaml.safe_load_all(proc.stdout) if d)


def template(
    release: dict, helm: str | None = None, *, again: bool = False, crds: bool | None = None
) -> tuple[dict, ...]:
    """The manifests provider-helm installs for a Release (its crds/ unless it skips them),
    rendered by `helm` (default: helm_bin()); again: rendered anew, not the kept rendering (what a
    chart draws at random, a generated CA say, differs between two); crds: the chart's crds/ or
    not, whatever the Release says."""
    chart = chart_of(release)
    path = chart_path(chart["name"], chart["version"])
    assert path is not None, f"no chart {chart['name']} {chart['version']} in {charts_dir()}"
    values = json.dumps(release["spec"]["forProvider"].get("values") or {}, sort_keys=True)
    namespace = release["spec"]["forProvider"]["namespace"]
    render = _template.__wrapped__ if again else _template
    if crds is None:
        crds = not release["spec"]["forProvider"].get("skipCRDs", False)
    return render(path, release_name(release), namespace, values, helm or helm_bin(), crds)


# --- which values a chart reads --------------------------------------------------------------------

VALUES_REF = re.compile(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
# A map a template takes whole: ranged over, assigned to a variable, or written out with toYaml.
WHOLE_MAP = re.compile(
    r"(?:range\s+[$\w, ]*:=\s*|:=\s*|toYaml\s+|toJson\s+)\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)"
    r"|\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)\s*\|\s*(?:toYaml|toJson)"
)


def leaf_paths(values: dict, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Each value the function sets, as its path of keys (a list is one value)."""
    paths = []
    for key, value in values.items():
        path = (*prefix, key)
        if isinstance(value, dict) and value:
            paths += leaf_paths(value, path)
        else:
            paths.append(path)
    return paths


def _path(text: str) -> tuple[str, ...]:
    return tuple(text.lstrip(".").split("."))


@functools.cache
def _chart_reads(path: Path) -> tuple[dict, frozenset, frozenset, dict, dict[str, Path]]:
    """A chart's defaults, the `.Values.` paths its templates name and take whole, its schema,
    its subcharts."""
    defaults = yaml.safe_load((path / "values.yaml").read_text()) or {}
    named, whole = set(), set()
    for template_file in (path / "templates").rglob("*"):
        if template_file.is_file():
            text = template_file.read_text(errors="replace")
            named |= {_path(m.group(1)) for m in VALUES_REF.finditer(text)}
            whole |= {_path(m.group(1) or m.group(2)) for m in WHOLE_MAP.finditer(text)}
    schema_file = path / "values.schema.json"
    schema = json.loads(schema_file.read_text()) if schema_file.is_file() else {}
    subcharts = {}
    for sub in (path / "charts").glob("*/Chart.yaml"):
        subcharts[yaml.safe_load(sub.read_text())["name"]] = sub.parent
    meta = yaml.safe_load((path / "Chart.yaml").read_text())
    for dep in meta.get("dependencies") or []:
        if dep.get("alias") and dep["name"] in subcharts:
            subcharts[dep["alias"]] = subcharts[dep["name"]]
    return defaults, frozenset(named), frozenset(whole), schema, subcharts


def _in_defaults(defaults: dict, path: tuple[str, ...]) -> bool:
    """The path is in values.yaml, or under a map that values.yaml leaves empty for the user to
    fill (`config:` with only comments, `nodeSelector: {}`), which a template passes on whole."""
    node = defaults
    for key in path:
        if not isinstance(node, dict):
            return False
        if key not in node:
            return node == {}
        node = node[key]
        if node is None:
            return True
    return True


def _in_schema(schema: dict, path: tuple[str, ...]) -> bool:
    node = schema
    for key in path:
        properties = node.get("properties") or {}
        if key not in properties:
            return False
        node = properties[key]
    return True


def reads(path: Path, value: tuple[str, ...]) -> bool:
    """Whether the chart at path reads this value: in values.yaml, its schema, a template's
    `.Values.` reference, under a map a template takes whole, or a subchart's values under the
    subchart's name."""
    defaults, named, whole, schema, subcharts = _chart_reads(path)
    if value[0] in subcharts and len(value) > 1 and reads(subcharts[value[0]], value[1:]):
        return True
    taken_whole = any(value[: len(w)] == w for w in whole)
    return (
        _in_defaults(defaults, value) or _in_schema(schema, value) or value in named or taken_whole
    )
