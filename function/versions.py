"""The one table of what the function installs: Helm charts and the provider versions it targets.

Bump a version here and nowhere else; the golden files show what the bump changes.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Chart:
    name: str
    repository: str
    version: str
    namespace: str


CHARTS: dict[str, Chart] = {
    "cert-manager": Chart(
        name="cert-manager",
        repository="https://charts.jetstack.io",
        version="v1.20.2",
        namespace="cert-manager",
    ),
}

# Identity types each provider's ClusterProviderConfig accepts, at the versions the Configuration
# package depends on (provider-kubernetes v1.2.1 has no Nebius identity; provider-helm v1.4.0 does).
IDENTITY_TYPES: dict[str, frozenset[str]] = {
    "kubernetes": frozenset(
        {
            "GoogleApplicationCredentials",
            "AzureServicePrincipalCredentials",
            "AzureWorkloadIdentityCredentials",
            "UpboundTokens",
            "AWSWebIdentityCredentials",
        }
    ),
    "helm": frozenset(
        {
            "GoogleApplicationCredentials",
            "AzureServicePrincipalCredentials",
            "AzureWorkloadIdentityCredentials",
            "UpboundTokens",
            "AWSWebIdentityCredentials",
            "NebiusServiceAccountCredentials",
        }
    ),
}
