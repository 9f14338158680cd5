"""Bodies of what goes onto a workload cluster: provider-helm Releases and provider-kubernetes
Objects, in modelplane-system, through the cluster's ClusterProviderConfig.
"""

from function import names
from function.versions import Chart

# Installed by a cloud with the cluster and gone with it: never deleted one by one, so a deleted
# cluster cannot leave a finalizer waiting on an API server that no longer exists.
ORPHAN = ["Observe", "Create", "Update"]
# provider-helm v1.4.0 retries a failed or stuck (pending) release only when rollbackLimit is set:
# it uninstalls a failed first install, rolls back a failed upgrade, and tries again, counting
# failures until the release deploys (pkg/controller/namespaced/release, shouldRollBack). Without
# it one slow image pull past the wait timeout leaves a release failed for good. A rollback
# installs the revision before: a release that must never go back (rollback=False) is retried
# only by the next change of its spec, and its failure stays on the XR in provider-helm's words.
RELEASE_RETRIES = 100


def release(
    xr: str,
    key: str,
    chart: Chart,
    provider_config: str,
    values: dict,
    *,
    wait: bool = False,
    policies: list[str] | None = None,
    skip_crds: bool = False,
    rollback: bool = True,
) -> dict:
    """A Helm release named mp-<key> on the cluster: short, stable and collision-free.
    skip_crds: the chart's crds/ are applied by the function, not installed once by Helm;
    rollback: provider-helm retries a failure (RELEASE_RETRIES)."""
    for_provider: dict = {
        "chart": {"name": chart.name, "repository": chart.repository, "version": chart.version},
        "namespace": chart.namespace,
        "values": values,
    }
    if skip_crds:
        for_provider["skipCRDs"] = True
    if wait:
        for_provider["wait"] = True
        for_provider["waitTimeout"] = "10m"
    spec: dict = {
        "providerConfigRef": {"kind": names.CLUSTER_PROVIDER_CONFIG, "name": provider_config},
        "forProvider": for_provider,
    }
    if rollback:
        spec["rollbackLimit"] = RELEASE_RETRIES
    if policies:
        spec["managementPolicies"] = policies
    return {
        "apiVersion": names.HELM_RELEASE_API,
        "kind": "Release",
        "metadata": {
            "name": names.child_name(xr, key),
            "namespace": names.SYSTEM_NAMESPACE,
            "annotations": {names.EXTERNAL_NAME: names.release_name(key)},
        },
        "spec": spec,
    }


def manifest_object(
    xr: str,
    key: str,
    manifest: dict,
    provider_config: str,
    *,
    policies: list[str] | None = None,
    ready_when: str | None = None,
    watch: bool = False,
) -> dict:
    """A provider-kubernetes Object carrying one manifest.

    ready_when is a CEL query over the remote object; without it the Object is ready once created.
    """
    spec: dict = {
        "providerConfigRef": {"kind": names.CLUSTER_PROVIDER_CONFIG, "name": provider_config},
        "forProvider": {"manifest": manifest},
    }
    if policies:
        spec["managementPolicies"] = policies
    if ready_when:
        spec["readiness"] = {"policy": "DeriveFromCelQuery", "celQuery": ready_when}
    if watch:
        spec["watch"] = True
    return {
        "apiVersion": names.OBJECT_API,
        "kind": "Object",
        "metadata": {"name": names.child_name(xr, key), "namespace": names.SYSTEM_NAMESPACE},
        "spec": spec,
    }


def storage_class(name: str, provisioner: str, **fields) -> dict:
    """A StorageClass manifest (storage.k8s.io/v1) for ModelCache's ReadWriteMany volumes."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        **fields,
    }
