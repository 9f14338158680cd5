"""Shared fixtures: the real crossplane CLI, the real provider CRDs, and the repository's paths.

Nothing here skips: a missing tool or CRD folder is a failure (make test builds the tools first).
"""

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APIS = ROOT / "apis"
EXAMPLES = ROOT / "examples"
COMPOSITIONS = ROOT / "compositions"

# Crossplane always adds its own image as a validate dependency; we pre-seed that cache entry with
# the Crossplane core CRDs from ../shared/crds so validate never reaches for a registry.
CROSSPLANE_IMAGE = "xpkg.crossplane.io/crossplane/crossplane:v2.3.4"


def crds_dir() -> Path:
    path = Path(os.environ.get("CRDS_DIR") or ROOT.parent / "shared" / "crds").resolve()
    if not (path / "SOURCES.md").is_file():
        pytest.fail(f"provider CRDs not found at {path}; set CRDS_DIR to ../shared/crds")
    return path


def crossplane_bin() -> str:
    path = os.environ.get("CROSSPLANE") or str(ROOT / ".tools" / "bin" / "crossplane")
    if not (Path(path).is_file() and os.access(path, os.X_OK)):
        found = shutil.which("crossplane")
        if not found:
            pytest.fail(f"crossplane CLI not found at {path}; run `make setup`")
        path = found
    return path


def crd_files() -> list[Path]:
    """Every provider and Crossplane CRD, minus the alternative Vultr provider that collides."""
    return sorted(p for p in crds_dir().rglob("*.yaml") if "_alternatives" not in p.parts)


@pytest.fixture(scope="session")
def crossplane() -> str:
    return crossplane_bin()


@pytest.fixture(scope="session")
def validate_cache(tmp_path_factory) -> Path:
    """A validate cache dir whose Crossplane image entry already holds the core CRDs."""
    cache = tmp_path_factory.mktemp("xpcache")
    image, tag = CROSSPLANE_IMAGE.rsplit(":", 1)
    seeded = cache / f"{image}@{tag}"
    seeded.mkdir(parents=True)
    for crd in (crds_dir() / "crossplane").glob("*.yaml"):
        shutil.copy(crd, seeded / crd.name)
    return cache


@pytest.hookimpl(trylast=True)
def pytest_configure(config) -> None:
    """Every function server of the session logs at debug level where the secrets scan reads."""
    logs = Path(config._tmp_path_factory.getbasetemp()) / "function-logs"
    logs.mkdir(parents=True, exist_ok=True)
    os.environ["FUNCTION_LOG_DIR"] = str(logs)


def pytest_collection_modifyitems(items) -> None:
    """The secrets scan reads what every other test produced: it runs last."""
    last = [i for i in items if i.nodeid.startswith("tests/test_zz_secrets.py")]
    items[:] = [i for i in items if i not in last] + last
