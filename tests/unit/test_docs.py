"""The docs say what the code does: every condition and reason the function can put on an XR is
explained in docs/status.md, every cloud's documented defaults are the ones it composes, and the
README stays a front door."""

import ast
import re

import pytest

from function import models
from function.__version__ import __version__
from function.clusters import aks, base, gke, nebius
from function.workload import GPU_TOLERATION
from tests.conftest import ROOT

DOCS = ROOT / "docs"
CLOUD_PAGES = ("eks", "gke", "aks", "nebius", "vultr", "existing")
PAGES = ("stack", "status", "operations", "security", "testing", "performance")


def reasons_and_conditions() -> tuple[set[str], set[str]]:
    """Every reason and condition type a literal in function/ can give a Result or a Condition:
    keyword or positional arguments of Result, Condition and warn, and what is assigned to a
    `reason` (a variable, a field or its default)."""
    reasons, conditions = set(), set()

    def literal(node) -> str | None:
        ok = isinstance(node, ast.Constant) and isinstance(node.value, str)
        return node.value if ok and re.fullmatch(r"[A-Z][A-Za-z]+", node.value) else None

    for path in sorted((ROOT / "function").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                positional = {"Result": 2, "Condition": 2, "warn": 1}.get(name)
                if positional is not None and len(node.args) > positional:
                    reasons.add(literal(node.args[positional]))
                if name == "Condition" and node.args:
                    conditions.add(literal(node.args[0]))
                for kw in node.keywords:
                    if kw.arg == "reason":
                        reasons.add(literal(kw.value))
            elif isinstance(node, ast.FunctionDef) and node.name == "warn":
                reasons.update(literal(d) for d in node.args.defaults)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    names = target.elts if isinstance(target, ast.Tuple) else [target]
                    values = (
                        node.value.elts
                        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                        else [node.value]
                    )
                    for t, v in zip(names, values, strict=False):
                        label = getattr(t, "id", None) or getattr(t, "attr", None)
                        if label == "reason" and v is not None:
                            reasons.add(literal(v))
    return reasons - {None}, conditions - {None}


def test_every_condition_and_reason_the_function_gives_is_explained():
    text = (DOCS / "status.md").read_text()
    reasons, conditions = reasons_and_conditions()
    assert {"ClusterReady", "BackendReady", "ClassesResolved"} <= conditions
    assert {"ProviderError", "KeptLiveField", "ShapeMismatch", "Installing"} <= reasons
    missing = sorted(r for r in reasons | conditions if f"`{r}`" not in text)
    assert not missing, f"docs/status.md does not explain: {missing}"


def test_every_page_the_readme_points_to_exists_and_the_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    first = readme.split("```", 2)[1]
    assert "make render" in first and "make test" in first
    for page in (*PAGES, *(f"clouds/{c}" for c in CLOUD_PAGES)):
        assert (DOCS / f"{page}.md").is_file(), page
        assert f"docs/{page}.md" in readme, page
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).exists(), link


DEFAULT_VERSIONS = {
    "eks": models.EKS,
    "gke": models.GKE,
    "aks": models.AKS,
    "nebius": models.Nebius,
    "vultr": models.Vultr,
}


@pytest.mark.parametrize("cloud", sorted(DEFAULT_VERSIONS))
def test_each_cloud_page_states_the_default_version_the_function_composes(cloud):
    default = DEFAULT_VERSIONS[cloud].model_fields["kubernetes_version"].default
    text = (DOCS / "clouds" / f"{cloud}.md").read_text()
    assert f"default `kubernetesVersion`: `{default}`" in text


def test_the_documented_gpu_labels_taints_and_upgrade_settings_are_the_composed_ones():
    clouds = (DOCS / "clouds" / "README.md").read_text()
    taint = base.GPU_TAINT
    assert f"`{taint['key']}={taint['value']}:{taint['effect']}`" in clouds
    assert GPU_TOLERATION["key"] == taint["key"]
    assert f"`{gke.GKE_GPU_TAINT['key']}={gke.GKE_GPU_TAINT['value']}`" in clouds
    assert "`modelplane.ai/pool=<pool>`" in clouds
    for key, value in gke.GPU_UPGRADE.items():
        if key != "strategy":
            assert f"`{key}: {value}`" in clouds, key
    assert f'`maxUnavailable: "{aks.GPU_UPGRADE["maxUnavailable"]}"`' in clouds
    strategy = nebius.GPU_STRATEGY
    assert f"`maxSurge: {{count: {strategy['maxSurge']['count']}}}`" in clouds


@pytest.mark.parametrize(
    ("cloud", "source"),
    [
        ("eks", "EKS"),
        ("gke", "GKE"),
        ("aks", "AKS"),
        ("nebius", "Nebius"),
        ("vultr", "Vultr"),
        ("existing", "Existing"),
    ],
)
def test_the_clouds_overview_says_what_each_cloud_page_says_it_composes(cloud, source):
    """docs/clouds/README.md's table repeats each page's row word for word: one is never left
    behind when the other moves."""
    page = (DOCS / "clouds" / f"{cloud}.md").read_text().splitlines()
    overview = (DOCS / "clouds" / "README.md").read_text().splitlines()
    [row] = [line for line in page if line.startswith(f"| `{source}` |")]
    assert row in overview


def test_every_install_and_push_command_names_the_release_at_hand():
    """The README and operations.md install and push the version function/__version__.py
    says, never an older release's tag."""
    version = __version__
    for page in (ROOT / "README.md", DOCS / "operations.md"):
        tags = re.findall(
            r"(?:function|modelplane)-inference-cluster:(v[0-9][^\s`]*)", page.read_text()
        )
        assert tags, page
        assert set(tags) == {f"v{version}"}, page
