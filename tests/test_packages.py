"""The Crossplane packages: metadata, pinned dependencies, and real `crossplane xpkg build` output.

`make package` runs with PKG_OUT pointing at a temporary directory, so the Makefile target itself
is what gets tested and nothing is written into the repository. A built .xpkg is a `docker save`
style tarball: manifest.json names the config blob and the layers; the config's labels
`io.crossplane.xpkg:<layer digest>` mark the layer holding package.yaml as "base" (that is how
Crossplane finds it too).
"""

import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from function.__version__ import __version__
from tests.conftest import APIS, COMPOSITIONS, ROOT, crds_dir

FUNCTION_META = ROOT / "package" / "crossplane.yaml"
CONFIGURATION_META = ROOT / "package" / "configuration" / "crossplane.yaml"
FUNCTION_NAME = "function-inference-cluster"
CONFIGURATION_NAME = "modelplane-inference-cluster"
FUNCTION_PACKAGE = "xpkg.upbound.io/modelplane/function-inference-cluster"
# "xpkg.upbound.io/upbound/provider-aws-eks:v2.6.0", or untagged ".../upbound/provider-vultr"
PACKAGE_REF = re.compile(r"(xpkg\.upbound\.io/[\w.-]+/[\w.-]+?)(?::(v\d+\.\d+\.\d+))?(?:\s|$)")


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def source_versions() -> dict[str, str]:
    """Package reference -> version, from the "Per package" table of SOURCES.md.

    The version comes from the package column (`...:vX.Y.Z`), or for an untagged source from the
    version it says the upstream README names (Vultr: "README names v1.0.0").
    """
    text = (crds_dir() / "SOURCES.md").read_text()
    section = text.split("## Per package", 1)[1].split("\n## ", 1)[0]
    versions = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 6 or cells[0].startswith(("`crossplane/", "`_alternatives")):
            continue
        m = PACKAGE_REF.search(cells[5])
        if not m:
            continue
        version = m.group(2)
        if version is None:
            named = re.search(r"names (v\d+\.\d+\.\d+)", cells[5])
            assert named, f"no version for {m.group(1)} in SOURCES.md: {cells[5]!r}"
            version = named.group(1)
        versions[m.group(1)] = version
    assert len(versions) >= 19, f"parsed too few packages from SOURCES.md: {versions}"
    return versions


# --- metadata -------------------------------------------------------------------------------------


def _package_meta(path, kind: str, name: str) -> dict:
    """A package's crossplane.yaml, checked for what every package of ours declares."""
    meta = _load(path)
    assert meta["apiVersion"] == "meta.pkg.crossplane.io/v1"
    assert meta["kind"] == kind
    assert meta["metadata"]["name"] == name
    assert meta["spec"]["crossplane"]["version"] == ">=v2.2.0"
    annotations = meta["metadata"]["annotations"]
    for key in ("maintainer", "source", "license", "description", "readme"):
        assert annotations.get(f"meta.crossplane.io/{key}"), key
    return meta


def test_function_meta():
    _package_meta(FUNCTION_META, "Function", FUNCTION_NAME)


def test_configuration_meta():
    meta = _package_meta(CONFIGURATION_META, "Configuration", CONFIGURATION_NAME)
    for dep in meta["spec"]["dependsOn"]:
        # The explicit v1 form; the provider:/function: keys are deprecated.
        assert dep["apiVersion"] == "pkg.crossplane.io/v1", dep
        assert dep["kind"] in ("Provider", "Function"), dep
        assert dep["package"] and dep["version"], dep


def test_configuration_depends_on_the_function():
    deps = _load(CONFIGURATION_META)["spec"]["dependsOn"]
    functions = [d for d in deps if d["kind"] == "Function"]
    assert [d["package"] for d in functions] == [FUNCTION_PACKAGE]
    assert FUNCTION_PACKAGE.rsplit("/", 1)[1] == FUNCTION_NAME


def test_provider_versions_match_sources():
    """Every provider whose CRDs we validate against is a dependency, at exactly that version."""
    want = source_versions()
    deps = _load(CONFIGURATION_META)["spec"]["dependsOn"]
    got = {d["package"]: d["version"] for d in deps if d["kind"] == "Provider"}
    assert len(got) == len([d for d in deps if d["kind"] == "Provider"]), "duplicate provider"
    assert got == want


# --- built packages -------------------------------------------------------------------------------


def _package_yaml(xpkg: Path) -> list[dict]:
    """The objects in the package.yaml of the layer an .xpkg labels "base"."""
    with tarfile.open(xpkg) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
        assert len(manifest) == 1, manifest
        config = json.load(tar.extractfile(manifest[0]["Config"]))
        labels = config["config"]["Labels"]
        # Label keys are io.crossplane.xpkg:sha256:<hex>; the layer file is <hex>.tar.gz.
        base = [k.rsplit(":", 1)[1] for k, v in labels.items() if v == "base"]
        assert len(base) == 1, labels
        layer = next(name for name in manifest[0]["Layers"] if name.startswith(base[0]))
        with tarfile.open(fileobj=tar.extractfile(layer)) as inner:
            text = inner.extractfile("package.yaml").read().decode()
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.fixture(scope="module")
def built(tmp_path_factory, crossplane) -> Path:
    """Run `make package` into a temporary PKG_OUT with the real crossplane CLI."""
    make = shutil.which("make")
    if not make:
        pytest.fail("make not found")
    out = tmp_path_factory.mktemp("pkg")
    result = subprocess.run(
        [
            make,
            "--no-print-directory",
            "-C",
            str(ROOT),
            "package",
            f"PKG_OUT={out}",
            f"CROSSPLANE={crossplane}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_configuration_package(built):
    xpkg = built / "configuration" / f"{CONFIGURATION_NAME}.xpkg"
    assert xpkg.is_file()
    objects = _package_yaml(xpkg)

    metas = [o for o in objects if o["apiVersion"].startswith("meta.pkg.crossplane.io/")]
    assert [(m["kind"], m["metadata"]["name"]) for m in metas] == [
        ("Configuration", CONFIGURATION_NAME)
    ]
    # As in the repository, but the function at exactly this release (function/__version__.py).
    want = _load(CONFIGURATION_META)["spec"]["dependsOn"]
    for dep in want:
        if dep["kind"] == "Function":
            dep["version"] = f"v{__version__}"
    assert metas[0]["spec"]["dependsOn"] == want

    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    xrds = sorted(APIS.glob("*/definition.yaml"))
    assert len(xrds) == 2, xrds
    for path in xrds:
        assert ("CompositeResourceDefinition", _load(path)["metadata"]["name"]) in names, path

    # The activation policy goes with the Configuration (tests/test_reliability.py checks its kinds).
    assert ("ManagedResourceActivationPolicy", "modelplane-inference-cluster") in names

    compositions = sorted(COMPOSITIONS.glob("*.yaml"))
    assert len(compositions) >= 2, f"expected at least 2 compositions, found {compositions}"
    for path in compositions:
        for doc in _docs(path):
            assert (doc["kind"], doc["metadata"]["name"]) in names, path


def test_function_package(built):
    xpkg = built / "function" / f"{FUNCTION_NAME}.xpkg"
    assert xpkg.is_file()
    objects = _package_yaml(xpkg)
    # Only the Function meta: package/configuration/crossplane.yaml must have been ignored.
    assert [(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("meta.pkg.crossplane.io/v1", "Function", FUNCTION_NAME)
    ]
