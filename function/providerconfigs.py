"""ClusterProviderConfigs that reach a workload cluster, for provider-kubernetes and provider-helm.

Every source ends here: a provisioned cloud once its kubeconfig Secret exists, Existing at once.
They are cluster-scoped so ModelReplicas in any team namespace can compose through them.
"""

from dataclasses import dataclass

from function import names
from function.output import Desired

API_VERSIONS = {
    "kubernetes": names.KUBERNETES_PROVIDER_CONFIG_API,
    "helm": names.HELM_PROVIDER_CONFIG_API,
}


@dataclass(frozen=True)
class SecretKey:
    """A key of a Secret in modelplane-system (credentials are never read, only referenced)."""

    name: str
    key: str
    namespace: str = names.SYSTEM_NAMESPACE

    def ref(self) -> dict:
        return {"namespace": self.namespace, "name": self.name, "key": self.key}


@dataclass(frozen=True)
class Identity:
    """How provider-kubernetes and provider-helm authenticate to the cluster beyond its kubeconfig:
    credentials in a Secret, or (secret None) the providers' own injected identity."""

    type: str
    secret: SecretKey | None

    def spec(self) -> dict:
        if self.secret is None:
            return {"type": self.type, "source": "InjectedIdentity"}
        return {"type": self.type, "source": "Secret", "secretRef": self.secret.ref()}


def render(
    name: str, kubeconfig: SecretKey, identity: Identity | None = None
) -> dict[str, Desired]:
    """Both ClusterProviderConfigs. provider-kubernetes v1.3.1 and provider-helm v1.4.0 take the
    same identity types (their CRDs' `identity.type` enums), Nebius's included."""
    resources: dict[str, Desired] = {}
    for provider, api_version in API_VERSIONS.items():
        spec: dict = {"credentials": {"source": "Secret", "secretRef": kubeconfig.ref()}}
        if identity is not None:
            spec["identity"] = identity.spec()
        resources[f"provider-config-{provider}"] = Desired(
            body={
                "apiVersion": api_version,
                "kind": names.CLUSTER_PROVIDER_CONFIG,
                "metadata": {"name": name},
                "spec": spec,
            },
            # A ProviderConfig has no Ready condition: it is usable as soon as it exists.
            ready=True,
        )
    return resources
