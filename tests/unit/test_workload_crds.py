"""Only what this project wrote is in git: third-party files come from registries or ../shared.

The workload CRDs the function applies are built into the package (hack/crds/fetch.sh, from the Go
module go.sum pins) or written here (the ModelExpress CRDs); each must mean what the upstream file
in ../shared/crds/workload means. No tracked file may be another project's copy.
"""

import hashlib
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from function.serving import modelexpress_crds
from function.serving.components import CRDS
from function.versions import CHART_CRDS, CHARTS, IMAGES, WORKLOAD_CRDS
from tests.charts import charts_dir
from tests.conftest import ROOT, crds_dir

HACK = ROOT / "hack" / "crds"
FETCHED = {
    "inference.networking.k8s.io_inferencepools.yaml": "gateway-api-inference-extension",
    "inference.networking.x-k8s.io_inferenceobjectives.yaml": "gateway-api-inference-extension",
}
# Charts' own crds/, which the function applies (CHART_CRDS), by file.
OF_CHARTS = {file: key for key, file in CHART_CRDS.items()}
OWN = {
    "modelexpress.nvidia.com_modelmetadatas.yaml": modelexpress_crds.model_metadata,
    "modelexpress.nvidia.com_modelcacheentries.yaml": modelexpress_crds.model_cache_entry,
}
# Another project's header: a copyright line with a year or "The ... Authors", SPDX text, a license
# grant. Built from parts so this file does not match itself.
HEADER = re.compile(
    "|".join(
        (
            r"copy" + r"right\s+(\(c\)\s*|©\s*)?(\d{4}|the\s+\w+)",
            r"SPDX-File" + r"CopyrightText",
            r"SPDX-License" + r"-Identifier",
            r"Licensed under the " + r"Apache License",
        )
    ),
    re.IGNORECASE,
)
# Shorter files (an empty __init__.py, "{}") match by accident, not by copying.
SMALLEST_COPY = 64


def upstream(folder: str, file: str) -> dict:
    return yaml.safe_load((crds_dir() / "workload" / folder / file).read_text())


@pytest.mark.parametrize("file", sorted(FETCHED))
def test_fetched_crds_mean_what_upstream_means(file):
    """make setup fetched them from the pinned module, and they are the upstream CRDs."""
    path = CRDS / file
    assert path.is_file(), f"{path}: run `make setup` (hack/crds/fetch.sh)"
    assert yaml.safe_load(path.read_text()) == upstream(FETCHED[file], file)


@pytest.mark.parametrize("key", sorted(CHART_CRDS))
def test_a_charts_crds_are_the_ones_its_version_ships(key):
    """What the function applies for a chart is, byte for byte, the crds/ of the chart at the
    version CHARTS pins (../shared/charts, as published), fetched from the module at its tag."""
    chart = CHARTS[key]
    (module,) = [m for m in WORKLOAD_CRDS if m.rsplit("/", 1)[-1] == chart.name]
    assert WORKLOAD_CRDS[module].removeprefix("v") == chart.version.removeprefix("v")
    file = CHART_CRDS[key]
    published = charts_dir() / f"{chart.name}-{chart.version}" / "crds" / file
    assert (CRDS / file).read_bytes() == published.read_bytes()
    assert sorted(p.name for p in published.parent.iterdir()) == [file]


@pytest.mark.parametrize("file", sorted(OWN))
def test_own_modelexpress_crds_mean_what_upstream_means(file):
    assert OWN[file]() == upstream("modelexpress", file)


def test_modelexpress_crds_follow_the_server_version():
    """Written from modelexpress-server 0.5.0's types: a bump of the image must look at them."""
    assert IMAGES["modelexpress-server"].endswith(":0.5.0")
    sources = (crds_dir() / "workload" / "SOURCES.md").read_text()
    assert re.search(r"\| `modelexpress/` \| ai-dynamo/modelexpress \| v0\.5\.0 \|", sources)


def test_the_crd_module_is_pinned_with_its_checksum():
    """versions.py, hack/crds/go.mod and go.sum name the same version, and go.sum carries the
    registry's checksum of its zip (what `go mod download` checks)."""
    go_mod = (HACK / "go.mod").read_text()
    go_sum = (HACK / "go.sum").read_text().splitlines()
    for module, version in WORKLOAD_CRDS.items():
        line = rf"^(require )?\s*{re.escape(module)} {re.escape(version)}$"
        assert re.search(line, go_mod, re.M), module
        assert any(
            re.fullmatch(rf"{re.escape(module)} {re.escape(version)} h1:\S+=", line)
            for line in go_sum
        )


def test_fetch_writes_the_crds_again_from_the_module(tmp_path):
    """fetch.sh alone (as make, build-image.sh and the Dockerfile run it) gives the same files."""
    subprocess.run([str(HACK / "fetch.sh"), str(tmp_path)], check=True, timeout=600)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FETCHED | OF_CHARTS)
    for file in FETCHED | OF_CHARTS:
        assert (tmp_path / file).read_bytes() == (CRDS / file).read_bytes()


def _tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout
    return [ROOT / p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def test_no_tracked_file_carries_another_projects_header():
    carrying = [
        str(p.relative_to(ROOT))
        for p in _tracked()
        if HEADER.search(p.read_bytes().decode("utf-8", "replace"))
    ]
    assert not carrying
    assert HEADER.search("# Copy" + "right 2017 Google Inc. All rights reserved.")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_no_tracked_file_is_a_copy_of_one_in_shared():
    shared = {crds_dir().parent, charts_dir().parent}
    known = {
        _digest(p): p
        for folder in shared
        for p in folder.rglob("*")
        if p.is_file() and p.stat().st_size >= SMALLEST_COPY
    }
    assert len(known) > 100
    copies = {
        str(p.relative_to(ROOT)): str(known[d])
        for p in _tracked()
        if p.stat().st_size >= SMALLEST_COPY and (d := _digest(p)) in known
    }
    assert not copies
