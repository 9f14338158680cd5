"""Errors that say what to do: a credentials name no ProviderConfig answers to is named with its
field on every cloud, whatever words the provider wraps it in."""

import pytest

from function.clusters.base import missing_provider_config
from function.compose import compose_cluster
from function.inputs import Observed
from tests.builders import all_classes, example, provider_configs
from tests.unit import sim

# The wrapped NotFound provider-upjet-aws v2.6.0 reports (internal/clients/pc_resolver.go), as a
# cached client and as the API server word it.
CACHED = (
    "connect failed: cannot get terraform setup: cannot get referenced ProviderConfig: "
    'ClusterProviderConfig.aws.m.upbound.io "{name}" not found'
)
SERVER = (
    "connect failed: cannot get terraform setup: cannot get referenced ProviderConfig: "
    'providerconfigs.azure.m.upbound.io "{name}" not found'
)


def test_the_message_is_matched_by_the_name_only():
    assert missing_provider_config(CACHED.format(name="default"), "default")
    assert missing_provider_config(SERVER.format(name="team-a"), "team-a")
    assert not missing_provider_config(CACHED.format(name="other"), "default")
    assert not missing_provider_config('secrets "default" not found', "default")
    assert not missing_provider_config("cannot get referenced ProviderConfig: timeout", "default")


def failing(name: str, key: str | None = None):
    """The example's second pass with one composed resource's provider (the first not ready,
    or key) reporting the ProviderConfig the credentials name missing."""
    xr, classes = example(name)
    required = all_classes(classes)
    if provider_configs(name):
        required["cloud-provider-config"] = provider_configs(name)
    first = compose_cluster(xr, required, Observed())
    creds = {"name": "default", "type": "ClusterProviderConfig"}
    creds |= xr["spec"]["cluster"][name].get("credentials", {})
    target = key or next(k for k, d in first.resources.items() if not d.ready)

    def edit(k, body):
        if k == target:
            body["status"] = {
                "conditions": [
                    {
                        "type": "Synced",
                        "status": "False",
                        "reason": "ReconcileError",
                        "message": CACHED.format(name=creds["name"]),
                    },
                    {"type": "Ready", "status": "False", "reason": "Creating"},
                ]
            }

    return creds, target, compose_cluster(xr, required, sim.observed_from(first, edit))


@pytest.mark.parametrize("name", ["eks", "aks", "vultr"])
def test_a_missing_provider_config_names_the_credentials_field(name):
    creds, key, out = failing(name)
    (warning,) = [r.message for r in out.results if r.reason == "ProviderConfigNotFound"]
    field = f"spec.cluster.{name}.credentials names {creds['type']}"
    assert warning.startswith(f"{field} {creds['name']!r}, which {key}'s provider cannot find")
    assert "create it, or name one that exists" in warning
    ready = next(c for c in out.conditions if c.type == "ClusterReady")
    assert ready.status is False and ready.message.startswith(field)


def test_gke_says_it_once_from_the_provider_config_it_reads():
    # GKE warns from the required resource itself; the providers' words add no second Warning.
    _, _, out = failing("gke")
    assert len([r for r in out.results if r.reason == "ProviderConfigNotFound"]) <= 1


def test_another_failure_is_not_taken_for_a_missing_provider_config():
    xr, classes = example("eks")
    required = all_classes(classes)
    first = compose_cluster(xr, required, Observed())
    key = next(iter(first.resources))

    def edit(k, body):
        if k == key:
            body["status"] = {
                "conditions": [
                    {"type": "Synced", "status": "False", "message": "AccessDenied: no"},
                ]
            }

    out = compose_cluster(xr, required, sim.observed_from(first, edit))
    assert not [r for r in out.results if r.reason == "ProviderConfigNotFound"]
