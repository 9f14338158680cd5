"""The serving stack installed on every workload cluster, through its helm ClusterProviderConfig.

Remote releases wait until both ClusterProviderConfigs are observed, so the provider never reports
"ProviderConfig not found" on the first reconcile; once a release exists it is always kept.
"""

from function import kube
from function.clusters.facts import ClusterFacts
from function.inputs import Inputs
from function.output import Desired
from function.versions import CHARTS

PROVIDER_CONFIG_KEYS = ("provider-config-kubernetes", "provider-config-helm")

# Chart values Modelplane relies on, per chart.
VALUES: dict[str, dict] = {
    # CRDs come with the chart and outlive it, so an uninstall never takes Certificates with it.
    "cert-manager": {"crds": {"enabled": True, "keep": True}},
}


def render(inputs: Inputs, cluster: ClusterFacts) -> dict[str, Desired]:
    if cluster.provider_config is None:
        return {}
    observed = inputs.observed.resources
    reachable = all(k in observed for k in PROVIDER_CONFIG_KEYS)
    resources = {}
    for key, chart in CHARTS.items():
        composed_key = f"release-{key}"
        if not (reachable or composed_key in observed):
            continue
        seen = observed.get(composed_key)
        resources[composed_key] = Desired(
            body=kube.release(
                inputs.xr.name, key, chart, cluster.provider_config, VALUES.get(key, {})
            ),
            ready=seen is not None and seen.ready,
        )
    return resources
