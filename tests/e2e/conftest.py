"""The real control plane, once for the tests in this folder (about 30-60 s to start with every CRD),
stopped when they are done. Its function runs from the runtime image, built once per session
(`runtime_image`, tests/conftest.py, shared with tests/test_image.py) and unpacked here.

Nothing skips: binaries that `make e2e-tools` did not build, or a missing CRD folder, fail. A host
that cannot build and run the image (root and mmdebstrap) fails in CI; elsewhere the function runs
from this checkout instead, and the one test about the image skips saying what is missing.
"""

import os

import pytest

from tests.conftest import crds_dir
from tests.e2e.controlplane import ControlPlane, StartupError, binaries, project_control_plane
from tests.e2e.kube import Kube
from tests.tools import image


@pytest.fixture(scope="package")
def function_image(request, tmp_path_factory) -> image.Rootfs | None:
    """The session's runtime image, unpacked for the control plane; None if the host cannot run
    it (outside CI)."""
    missing = image.build_host_missing()
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI: {missing}; .ci/run must provide it")
        return None
    built = request.getfixturevalue("runtime_image")
    return image.rootfs(built.tarball, tmp_path_factory.mktemp("function-rootfs") / "root")


@pytest.fixture(scope="package")
def control_plane(request, tmp_path_factory) -> ControlPlane:
    os.environ.setdefault("CRDS_DIR", str(crds_dir()))
    try:
        binaries()
    except FileNotFoundError as e:
        pytest.fail(str(e))
    function_image = request.getfixturevalue("function_image")  # after the checks: it builds
    cp = project_control_plane(tmp_path_factory.mktemp("controlplane"), function_image)
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
