"""The real control plane, once for the tests in this folder (about 30-60 s to start with every CRD),
stopped when they are done.

Nothing skips: binaries that `make e2e-tools` did not build, or a missing CRD folder, fail.
"""

import os

import pytest

from tests.conftest import crds_dir
from tests.e2e.controlplane import ControlPlane, StartupError, binaries, project_control_plane
from tests.e2e.kube import Kube


@pytest.fixture(scope="package")
def control_plane(tmp_path_factory) -> ControlPlane:
    os.environ.setdefault("CRDS_DIR", str(crds_dir()))
    try:
        binaries()
    except FileNotFoundError as e:
        pytest.fail(str(e))
    cp = project_control_plane(tmp_path_factory.mktemp("controlplane"))
    try:
        cp.start()
    except StartupError as e:
        pytest.fail(f"the control plane did not start: {e}")
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="package")
def kube(control_plane) -> Kube:
    assert control_plane.kube is not None
    return control_plane.kube


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "existing_only: an end-to-end assertion that holds only for source Existing"
    )
    config.addinivalue_line(
        "markers", "drops_pool: runs for the examples that name a pool to drop (E2EExample.drop)"
    )


def pytest_collection_modifyitems(config, items):
    """Existing-only tests run for the Existing examples of E2E_EXAMPLES (deselected, not skipped,
    for the cloud ones)."""
    keep, drop = [], []
    for item in items:
        example = getattr(getattr(item, "callspec", None), "params", {}).get("deployed")
        if example is not None and (
            (item.get_closest_marker("existing_only") and not example.existing)
            or (item.get_closest_marker("drops_pool") and example.drop is None)
        ):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
