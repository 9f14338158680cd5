"""Kubernetes versions a cloud no longer (or not yet) creates clusters on are warned, with the
calendar named, and ClusterReady says so while the cluster waits; the version itself is never
changed."""

from datetime import UTC, datetime

import pytest

from function import clock
from function.clusters import calendars
from function.compose import compose_cluster
from function.inputs import Observed
from tests.builders import all_classes, example, provider_configs
from tests.unit import sim

FIELD = {
    "aks": "aks",
    "aks-a10": "aks",
    "nebius": "nebius",
    "vultr": "vultr",
    "eks": "eks",
    "gke": "gke",
}


def render(name: str, version: str | None = None, observed: Observed | None = None):
    xr, classes = example(name)
    block = xr["spec"]["cluster"][FIELD[name]]
    if version is None:
        block.pop("kubernetesVersion", None)
    else:
        block["kubernetesVersion"] = version
    required = all_classes(classes)
    if provider_configs(name):
        required["cloud-provider-config"] = provider_configs(name)
    return xr, required, compose_cluster(xr, required, observed or Observed())


def warnings(out, reason: str) -> list[str]:
    return [r.message for r in out.results if r.reason == reason]


def cluster_ready(out) -> str:
    return next(c.message for c in out.conditions if c.type == "ClusterReady")


def test_the_aks_default_is_past_support_and_is_warned_but_kept():
    # The spec's default for AKS, 1.34, left AKS support at the end of November 2026.
    _, _, out = render("aks", None)
    (message,) = warnings(out, "KubernetesVersionUnsupported")
    assert "spec.cluster.aks.kubernetesVersion 1.34" in message
    assert "2026-12-01" in message and "AKS Kubernetes release calendar" in message
    assert "creates no cluster" in message and "choose 1.35 or newer" in message
    assert out.resources["cluster"].body["spec"]["forProvider"]["kubernetesVersion"] == "1.34"
    assert "Kubernetes 1.34 is past AKS's support" in cluster_ready(out)


def test_a_supported_version_says_nothing():
    supported = (
        ("aks", "1.35"),
        ("aks", "1.37"),
        ("nebius", "1.35"),
        ("vultr", None),
        ("eks", None),
        ("eks", "1.35"),
        ("gke", None),
        ("gke", "1.36"),
    )
    for name, version in supported:
        _, _, out = render(name, version)
        assert not warnings(out, "KubernetesVersionUnsupported"), name
        assert not warnings(out, "KubernetesVersionUnknown"), name


def test_support_ends_on_the_calendars_day():
    with clock.fixed(datetime(2027, 3, 31, 23, 59, tzinfo=UTC)):
        assert not warnings(render("aks", "1.35")[2], "KubernetesVersionUnsupported")
    with clock.fixed(datetime(2027, 4, 1, tzinfo=UTC)):
        (message,) = warnings(render("aks", "1.35")[2], "KubernetesVersionUnsupported")
        assert "choose 1.36 or newer" in message


@pytest.mark.parametrize(
    ("name", "version", "field"),
    [
        ("aks", "1.39", "spec.cluster.aks.kubernetesVersion 1.39"),
        ("nebius", "1.36", "spec.cluster.nebius.kubernetesVersion 1.36"),
        ("vultr", "v1.37.1+1", "spec.cluster.vultr.kubernetesVersion v1.37.1+1"),
    ],
)
def test_a_minor_newer_than_the_calendar_is_warned_until_the_cloud_took_it(name, version, field):
    xr, required, out = render(name, version)
    (message,) = warnings(out, "KubernetesVersionUnknown")
    assert message.startswith(field) and "newer than" in message
    assert f"Kubernetes {version}" in cluster_ready(out)
    converged = sim.converge(xr, required)
    assert not warnings(converged, "KubernetesVersionUnknown")


def test_a_running_cluster_past_support_is_told_so_not_that_it_cannot_be_created():
    xr, required, _ = render("aks", "1.35")
    converged = sim.converge(xr, required)
    with clock.fixed(datetime(2027, 5, 1, tzinfo=UTC)):
        out = compose_cluster(xr, required, sim.reported(converged))
    (message,) = warnings(out, "KubernetesVersionUnsupported")
    assert "supports the running cluster no longer" in message


def test_a_vke_minor_past_upstream_end_of_life_is_warned_without_saying_vke_refuses_it():
    """VKE publishes no end dates: upstream's end of life is the floor (no more patches), and
    nothing claims VKE refuses the version or holds ClusterReady's words."""
    _, _, out = render("vultr", "v1.34.8+1")
    (message,) = warnings(out, "KubernetesVersionUnsupported")
    assert message.startswith("spec.cluster.vultr.kubernetesVersion v1.34.8+1 is past its end")
    assert "on 2026-10-27 (upstream Kubernetes, kubernetes.io/releases" in message
    assert "may stop offering it; choose 1.35 or newer" in message
    assert "creates no cluster" not in message
    assert "v1.34.8+1" not in cluster_ready(out)
    assert out.resources["cluster"].body["spec"]["forProvider"]["version"] == "v1.34.8+1"


def test_the_nebius_default_is_past_upstream_end_of_life_and_is_warned_but_kept():
    _, _, out = render("nebius", None)
    (message,) = warnings(out, "KubernetesVersionUnsupported")
    assert message.startswith("spec.cluster.nebius.kubernetesVersion 1.34 is past its end of life")
    assert "Nebius upgrades a control plane past its support itself" in message
    assert "choose 1.35 or newer" in message
    assert out.resources["cluster"].body["spec"]["forProvider"]["controlPlane"]["version"] == "1.34"


def test_the_vke_default_is_warned_from_the_day_after_upstreams_end_of_life():
    # 2027-06-28 is 1.36's last day of patches (kubernetes.io/releases/1.36).
    with clock.fixed(datetime(2027, 6, 28, 23, 59, tzinfo=UTC)):
        assert not warnings(render("vultr", None)[2], "KubernetesVersionUnsupported")
    with clock.fixed(datetime(2027, 6, 29, tzinfo=UTC)):
        (message,) = warnings(render("vultr", None)[2], "KubernetesVersionUnsupported")
        assert "v1.36.1+3 is past its end of life on 2027-06-28" in message
        assert "choose a newer minor" in message  # the calendar knows none newer yet


def test_a_nebius_drivers_preset_without_a_node_image_for_the_minor_is_warned():
    xr, classes = example("nebius")
    for cls in classes:
        cls["spec"]["provisioning"]["nebius"]["driversPreset"] = "cuda12"
    required = all_classes(classes) | {"cloud-provider-config": provider_configs("nebius")}
    out = compose_cluster(xr, required, Observed())
    found = warnings(out, "DriversPresetUnsupported")
    assert found and all("driversPreset cuda12 has no Nebius node image" in m for m in found)
    assert "presets for 1.35: cuda13.0" in found[0]
    assert not warnings(
        sim.converge(
            xr,
            all_classes(example("nebius")[1])
            | {"cloud-provider-config": provider_configs("nebius")},
        ),
        "DriversPresetUnsupported",
    )


def test_the_calendars_are_in_order():
    for calendar in (calendars.AKS, calendars.VULTR):
        ends = [calendar.ends[m] for m in sorted(calendar.ends)]
        assert ends == sorted(ends), calendar.cloud
    for preset, minors in calendars.NEBIUS_DRIVERS_PRESETS.items():
        assert minors, preset


@pytest.mark.parametrize(
    ("name", "version", "since", "calendar", "choose"),
    [
        ("eks", "1.33", "2026-07-29", "Amazon EKS Kubernetes release calendar", "1.34"),
        ("gke", "1.34", "2026-10-01", "GKE release schedule", "1.35"),
    ],
)
def test_eks_and_gke_warn_a_minor_past_their_calendars_support(
    name, version, since, calendar, choose
):
    # On the fixtures' clock (2026-12-01) EKS 1.34 has a day left; 1.33 is past it.
    _, _, out = render(name, version)
    (message,) = warnings(out, "KubernetesVersionUnsupported")
    assert message.startswith(f"spec.cluster.{name}.kubernetesVersion {version} is past")
    assert since in message and calendar in message and f"choose {choose} or newer" in message
    if name == "eks":
        assert "upgradePolicy.supportType STANDARD" in message
    if "cluster" in out.resources:  # EKS composes it once its log group is there
        body = out.resources["cluster"].body["spec"]["forProvider"]
        assert version in (body.get("version"), body.get("minMasterVersion"))
    assert f"Kubernetes {version} is past" in cluster_ready(out)


def test_eks_and_gke_warn_a_minor_newer_than_their_calendars():
    for name in ("eks", "gke"):
        _, _, out = render(name, "1.39")
        (message,) = warnings(out, "KubernetesVersionUnknown")
        assert message.startswith(f"spec.cluster.{name}.kubernetesVersion 1.39 is newer than")
