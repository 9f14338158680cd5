"""Shared fixtures: the real crossplane CLI, the real provider CRDs, the runtime image, and the
repository's paths.

Nothing here skips but the runtime image, which needs root and mmdebstrap: without them CI fails,
and elsewhere what needs the image skips with what is missing. A missing tool or CRD folder is a
failure (make test builds the tools first).
"""

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import settings

from function import clock
from tests.tools import image

# No property test is timed: speed targets live in `make bench`, and a 2-core CI machine busy with
# an e2e makes Hypothesis' default 200 ms deadline fail a correct example (FlakyFailure).
settings.register_profile("untimed", deadline=None)
settings.load_profile("untimed")

ROOT = Path(__file__).resolve().parent.parent
APIS = ROOT / "apis"
EXAMPLES = ROOT / "examples"
COMPOSITIONS = ROOT / "compositions"

# Crossplane always adds its own image as a validate dependency; we pre-seed that cache entry with
# the Crossplane core CRDs from ../shared/crds so validate never reaches for a registry.
CROSSPLANE_IMAGE = "xpkg.crossplane.io/crossplane/crossplane:v2.3.4"


# The wall clock of every in-process composition (function/clock.py): the fixtures' dates (a
# Capacity Block's start and end) mean the same on every day the tests run. A test may fix its own.
TEST_NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def fixed_clock():
    with clock.fixed(TEST_NOW):
        yield


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


def require_image_host() -> None:
    """Skip (fail in CI) unless this host can build and run the runtime image."""
    missing = image.build_host_missing()
    if missing is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI: {missing}; .ci/run must provide it")
    pytest.skip(missing)


@pytest.fixture(scope="session")
def image_sources(tmp_path_factory) -> image.Sources:
    """One snapshot of what the image is built from, with one SOURCE_DATE_EPOCH, for the session."""
    require_image_host()
    return image.snapshot(tmp_path_factory.mktemp("image-src"))


@pytest.fixture(scope="session")
def runtime_image(image_sources, tmp_path_factory) -> image.Image:
    """`make image`, once per session: tests/test_image.py and the e2e control plane share it."""
    out = tmp_path_factory.mktemp("image-a")
    return image.read_image(image.build(image_sources, out))


@pytest.hookimpl(trylast=True)
def pytest_configure(config) -> None:
    """Every function server of the session logs at debug level where the secrets scan reads."""
    given = os.environ.get("FUNCTION_LOG_DIR")  # hack/test: one folder for its sessions
    logs = Path(given) if given else Path(config._tmp_path_factory.getbasetemp()) / "function-logs"
    logs.mkdir(parents=True, exist_ok=True)
    os.environ["FUNCTION_LOG_DIR"] = str(logs)


def pytest_collection_modifyitems(items) -> None:
    """The secrets scan reads what every other test produced: it runs last."""
    last = [i for i in items if i.nodeid.startswith("tests/test_zz_secrets.py")]
    items[:] = [i for i in items if i not in last] + last
