"""The inference gateway on a workload cluster, its own CA, and mutual TLS with the fleet.

- A per-cluster CA (self-signed Issuer -> CA Certificate -> CA Issuer) signs the gateway's serving
  Certificate for the cluster's stable hostname.
- trust-manager publishes the CA's public certificate into a ConfigMap; the function observes that
  ConfigMap, never the Secret that holds the CA's key.
- The Gateway requires client certificates signed by a CA of an InferenceGateway that routes
  here: their public CAs, sorted by name, go into a client-CA ConfigMap a ClientTrafficPolicy
  references. Without any, the Gateway is not composed at all: closed, and the hostname withheld.
"""

import base64
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from function import names
from function.output import Result
from function.serving import drains
from function.versions import CHARTS

NAMESPACE = names.SYSTEM_NAMESPACE
GATEWAY = "inference-gateway"
GATEWAY_CLASS = "modelplane"
SERVING_SECRET = "inference-gateway-serving"  # noqa: S105 - a Secret's name, not a secret
SELF_SIGNED_ISSUER = "modelplane-selfsigned"
CA = "modelplane-cluster-ca"
CLIENT_CAS = "modelplane-inference-gateway-cas"
CA_KEY = "ca.crt"
MAX_CA_BYTES = 16384
PEM_CERTIFICATE = "-----BEGIN CERTIFICATE-----"

CERT_MANAGER = "cert-manager.io/v1"
GATEWAY_API = "gateway.networking.k8s.io/v1"
ENVOY_GATEWAY = "gateway.envoyproxy.io/v1alpha1"

CERTIFICATE_READY = (
    "has(object.status) && has(object.status.conditions) && "
    "object.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')"
)
GATEWAY_HAS_ADDRESS = (
    "has(object.status) && has(object.status.addresses) && size(object.status.addresses) > 0"
)
POLICY_ACCEPTED = (
    "has(object.status) && has(object.status.ancestors) && object.status.ancestors.exists(a, "
    "has(a.conditions) && a.conditions.exists(c, c.type == 'Accepted' && c.status == 'True'))"
)
BUNDLE_SYNCED = (
    "has(object.status) && has(object.status.conditions) && "
    "object.status.conditions.exists(c, c.type == 'Synced' && c.status == 'True')"
)


def hostname(xr: str) -> str:
    """The cluster's stable internal name: TLS SNI and the serving certificate's SAN.

    InferenceGateways resolve it to status.gateway.address themselves, so nobody publishes DNS.
    """
    return f"{names.cloud_name('gateway', xr, cluster=xr)}.{NAMESPACE}.svc.cluster.local"


def is_public_certificate(text: object) -> bool:
    """A PEM certificate (bundle) of a sane size that carries no private key."""
    return (
        isinstance(text, str)
        and PEM_CERTIFICATE in text
        and "PRIVATE KEY" not in text
        and len(text.encode()) <= MAX_CA_BYTES
    )


@dataclass(frozen=True)
class ClientCA:
    name: str
    certificate: str


def client_cas(gateways: list[dict]) -> tuple[ClientCA, ...]:
    """Every InferenceGateway's published client CA, sorted by namespace/name."""
    out = []
    for g in gateways:
        meta = g.get("metadata") or {}
        ca = (g.get("status") or {}).get("clientCACertificate")
        if is_public_certificate(ca):
            name = "/".join(p for p in (meta.get("namespace"), meta.get("name")) if p)
            out.append(ClientCA(name, ca))
    return tuple(sorted(out, key=lambda c: c.name))


def fingerprint(pem: str) -> str:
    """The SHA-256 fingerprint of a PEM bundle's first certificate (its DER), as openssl prints
    it, shortened: enough to tell two CA certificates apart in an event."""
    body = pem.split(PEM_CERTIFICATE, 1)[1].split("-----END", 1)[0]
    der = base64.b64decode("".join(body.split()), validate=False)
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, 16, 2))


def ca_changed(published: object, observed: str | None) -> list[Result]:
    """A Normal result when the CA trust-manager publishes is not the one status carries: the
    CA was renewed (or made anew), and every InferenceGateway must trust the new one."""
    if observed is None or not is_public_certificate(published) or published == observed:
        return []
    return [
        Result(
            "Normal",
            f"the gateway's CA certificate changed ({fingerprint(published)}... -> "
            f"{fingerprint(observed)}...): status.gateway.caCertificate carries the new one. "
            "cert-manager renews it with the same key, so certificates it signed before still "
            "verify; an InferenceGateway that pinned the old certificate must take the new one "
            "before the old one expires",
            reason="GatewayCAChanged",
        )
    ]


# --- manifests -----------------------------------------------------------------------------------


def selfsigned_issuer() -> dict:
    return _issuer(SELF_SIGNED_ISSUER, {"selfSigned": {}})


def ca_certificate(xr: str) -> dict:
    """A long-lived ECDSA CA, renewed by cert-manager a year before it expires, with the same
    key: the Bundle publishes only the renewed certificate, and a serving certificate signed
    before (valid for up to 90 days more) must still chain to it. Same subject, same key, so
    either CA certificate verifies what the other signed (RFC 5280 path building matches the
    issuer's name and key identifier, both unchanged)."""
    spec = {"isCA": True, "commonName": f"modelplane cluster CA {xr}"[:64]}
    return _certificate(CA, SELF_SIGNED_ISSUER, "87600h", "8760h", spec, rotation="Never")


def ca_issuer() -> dict:
    return _issuer(CA, {"ca": {"secretName": CA}})


def serving_certificate(host: str) -> dict:
    return _certificate(SERVING_SECRET, CA, "2160h", "720h", {"dnsNames": [host]})


def _certificate(
    name: str,
    issuer: str,
    duration: str,
    renew_before: str,
    spec: dict,
    rotation: str = "Always",
) -> dict:
    """An ECDSA Certificate in the gateway namespace, its Secret of the same name, signed by an
    Issuer there; its key is rotated with it unless rotation says Never."""
    return {
        "apiVersion": CERT_MANAGER,
        "kind": "Certificate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            **spec,
            "secretName": name,
            "duration": duration,
            "renewBefore": renew_before,
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": rotation},
            "issuerRef": {"name": issuer, "kind": "Issuer", "group": "cert-manager.io"},
        },
    }


def ca_bundle() -> dict:
    """trust-manager copies the CA's public certificate (only ca.crt) into a ConfigMap."""
    return {
        "apiVersion": "trust.cert-manager.io/v1alpha1",
        "kind": "Bundle",
        "metadata": {"name": CA},
        "spec": {
            "sources": [{"secret": {"name": CA, "key": CA_KEY}}],
            "target": {
                "configMap": {"key": CA_KEY},
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
            },
        },
    }


def ca_configmap() -> dict:
    """What the function observes (Observe-only): the Bundle's ConfigMap."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CA, "namespace": NAMESPACE},
    }


def client_ca_configmap(cas: tuple[ClientCA, ...]) -> dict:
    bundle = "".join(
        c.certificate if c.certificate.endswith("\n") else c.certificate + "\n" for c in cas
    )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CLIENT_CAS, "namespace": NAMESPACE},
        "data": {CA_KEY: bundle},
    }


# Envoy Gateway v1.8.3 labels every proxy pod of a Gateway with its owner's name and namespace
# (internal/infrastructure/kubernetes/proxy/resource.go envoyLabels, OwningGatewayNameLabel).
PROXY_POD_LABELS = {
    "gateway.envoyproxy.io/owning-gateway-name": GATEWAY,
    "gateway.envoyproxy.io/owning-gateway-namespace": NAMESPACE,
}


def envoy_proxy(service_annotations: Iterable[tuple[str, str]] = ()) -> dict:
    """The data plane's Service keeps client traffic policy Cluster (Nebius rejects Local) and
    carries the annotations the cloud's load balancer wants (an NLB on EKS). Two proxies,
    spread, and a disruption budget that lets a drain take one at a time (Envoy Gateway's
    default is one replica and no budget: every drain of its node took the gateway down)."""
    service: dict = {"externalTrafficPolicy": "Cluster"}
    if service_annotations:
        service["annotations"] = dict(service_annotations)
    kubernetes = {
        "envoyService": service,
        "envoyDeployment": {
            "replicas": drains.REPLICAS,
            "pod": {"topologySpreadConstraints": drains.spread(PROXY_POD_LABELS)},
        },
        "envoyPDB": dict(drains.BUDGET),
    }
    return {
        "apiVersion": ENVOY_GATEWAY,
        "kind": "EnvoyProxy",
        "metadata": {"name": GATEWAY, "namespace": NAMESPACE},
        "spec": {"provider": {"type": "Kubernetes", "kubernetes": kubernetes}},
    }


# Where an EnvoyProxy keeps its Service's annotations (envoy_proxy).
SERVICE_ANNOTATIONS = ("spec", "provider", "kubernetes", "envoyService", "annotations")
# Annotations that choose which load balancer a cloud makes for the Service. Changed on a live
# Service, the AWS cloud provider creates a new load balancer and leaks the old one
# (kubernetes/cloud-provider-aws#1254), so a live Service keeps them as it has them (or without
# them). Every other annotation tunes the load balancer in place and follows the cloud's value.
CHOOSES_LOAD_BALANCER = frozenset({"service.beta.kubernetes.io/aws-load-balancer-type"})


def service_annotations(annotations: object) -> tuple[tuple[str, str], ...]:
    """An EnvoyProxy's Service annotations (read at SERVICE_ANNOTATIONS), as envoy_proxy takes
    them."""
    if not isinstance(annotations, dict):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in annotations.items()))


def envoy_service_name() -> str:
    """The name Envoy Gateway v1.8.3 gives the Gateway's Service in its own namespace:
    "envoy-" + GetHashedName("<namespace>/<gateway>", 48) (internal/infrastructure/kubernetes/
    proxy/resource.go ExpectedResourceHashedName, internal/utils/misc.go GetHashedName)."""
    key = f"{NAMESPACE}/{GATEWAY}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    name = key.replace("/", "-")
    if len(name) > 48:
        name = name[:48].removesuffix("-")
    return f"envoy-{name}-{digest}"


def load_balancer() -> dict:
    """The Gateway's Service, as Envoy Gateway makes it: watched (Observe and Delete) so that
    deleting the stack waits until the cloud's load balancer behind it is gone (the Service
    keeps its service.kubernetes.io/load-balancer-cleanup finalizer until then)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": envoy_service_name(),
            "namespace": CHARTS["envoy-gateway"].namespace,
        },
    }


def gateway_class() -> dict:
    return {
        "apiVersion": GATEWAY_API,
        "kind": "GatewayClass",
        "metadata": {"name": GATEWAY_CLASS},
        "spec": {
            "controllerName": "gateway.envoyproxy.io/gatewayclass-controller",
            "parametersRef": {
                "group": "gateway.envoyproxy.io",
                "kind": "EnvoyProxy",
                "name": GATEWAY,
                "namespace": NAMESPACE,
            },
        },
    }


def gateway(host: str) -> dict:
    """One HTTPS listener for the cluster's hostname, nothing in clear text: routes attach
    without a section name, so a plain HTTP listener would expose every engine."""
    return {
        "apiVersion": GATEWAY_API,
        "kind": "Gateway",
        "metadata": {"name": GATEWAY, "namespace": NAMESPACE},
        "spec": {
            "gatewayClassName": GATEWAY_CLASS,
            "listeners": [
                {
                    "name": "https",
                    "protocol": "HTTPS",
                    "port": 443,
                    "hostname": host,
                    "tls": {
                        "mode": "Terminate",
                        "certificateRefs": [{"kind": "Secret", "name": SERVING_SECRET}],
                    },
                    "allowedRoutes": {
                        "namespaces": {
                            "from": "Selector",
                            "selector": {
                                "matchExpressions": [
                                    {"key": "modelplane.ai/namespace", "operator": "Exists"}
                                ]
                            },
                        }
                    },
                }
            ],
        },
    }


def client_auth() -> dict:
    """Only clients with a certificate from an InferenceGateway's CA get through."""
    return {
        "apiVersion": ENVOY_GATEWAY,
        "kind": "ClientTrafficPolicy",
        "metadata": {"name": f"{GATEWAY}-client-auth", "namespace": NAMESPACE},
        "spec": {
            "targetRefs": [
                {
                    "group": "gateway.networking.k8s.io",
                    "kind": "Gateway",
                    "name": GATEWAY,
                    "sectionName": "https",
                }
            ],
            "tls": {
                "clientValidation": {
                    "mode": "RequireAndVerify",
                    "caCertificateRefs": [{"kind": "ConfigMap", "name": CLIENT_CAS}],
                }
            },
        },
    }


def _issuer(name: str, spec: dict) -> dict:
    return {
        "apiVersion": CERT_MANAGER,
        "kind": "Issuer",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }
