"""The ModelExpress server (Dynamo stack), in a namespace of its own, and its move out of `default`.

Until this release the server ran in `default`, with a Role over every ConfigMap there (CIS EKS
4.5.2, AKS 4.6.3, GKE 4.6.4: no workloads in the default namespace). It now runs in
`modelexpress-system`, named as the stack's other namespaces (`grove-system`, `lws-system`), and
engines reach it at ADDRESS.

A live cluster moves without a window in which engines cannot reach it (each step is read from
what is observed, never from something missing):
1. the new namespace, access, Service and Deployment are composed beside the old ones, which stay
   as they run;
2. once the new Deployment is Available (its Service composed before it), the old Service in
   `default` becomes an ExternalName alias of the new one's FQDN: the name engines were given
   (`modelexpress-server`, `.default`, `.default.svc.cluster.local`) answers with a CNAME to it.
   Established connections to the old pod go on (kube-proxy's iptables and nftables modes leave
   them to conntrack) until it goes;
3. once the API server holds the alias (the Service provider-kubernetes reads back is an
   ExternalName) and the new server is still Available, the old Deployment goes; its connections
   break as at any rollout of the one-replica server, and the clients' reconnect resolves the
   alias;
4. once the old Deployment is gone, its ServiceAccount, Role and RoleBinding go.
The alias stays for engines configured with the old name; new clusters never get it.

State: the server keeps its metadata as ModelMetadata and ModelCacheEntry objects (and tensor
ConfigMaps owned by them) in its own namespace (modelexpress 0.5.0 `backend_config.rs`, the
namespace from POD_NAMESPACE); its download cache is an emptyDir, lost at any restart. Nothing is
copied: the new server starts empty (docs/stack.md says what that means for running engines).
"""

from collections.abc import Mapping

from function.inputs import ObservedResource
from function.versions import IMAGES

NAME = "modelexpress-server"
PORT = 8001
NAMESPACE = "modelexpress-system"
LEGACY_NAMESPACE = "default"
# What engines are given (MX_SERVER_ADDRESS, and MODEL_EXPRESS_URL while clients still read it:
# modelexpress 0.5.0 README): the FQDN, since engines run in namespaces of their own.
ADDRESS = f"{NAME}.{NAMESPACE}.svc.cluster.local:{PORT}"
GROUP = "modelexpress.nvidia.com"

# Resource keys. The new layout's:
NAMESPACE_KEY = "modelexpress-namespace"
SERVICE_KEY = "modelexpress-service"
DEPLOYMENT_KEY = "modelexpress-deployment"
# The layout in `default` live clusters run (the Service key stays, as the alias):
LEGACY_SERVICE_KEY = "modelexpress-server-service"
LEGACY_DEPLOYMENT_KEY = "modelexpress-server"
LEGACY_ACCESS_KEYS = (
    "modelexpress-server-serviceaccount",
    "modelexpress-server-role",
    "modelexpress-server-rolebinding",
)
# The name of the move in Context.moved.
MOVED = "modelexpress"

# What the server does through the API, read in modelexpress-server 0.5.0: ModelMetadata get,
# get_opt, list, create, merge patch (ownerReferences), delete, and its status merge-patched
# (src/p2p/backend/kubernetes.rs); tensor ConfigMaps created, merge-patched when they exist, read,
# listed by label and deleted (the same file); ModelCacheEntry get, list, create, delete, and its
# status merge- and JSON-patched (src/registry/backend/kubernetes.rs). No watch, no update: the
# upstream examples' grants are wider than the server's use.
RULES = [
    {
        "apiGroups": [GROUP],
        "resources": ["modelmetadatas"],
        "verbs": ["get", "list", "create", "patch", "delete"],
    },
    {"apiGroups": [GROUP], "resources": ["modelmetadatas/status"], "verbs": ["patch"]},
    {
        "apiGroups": [GROUP],
        "resources": ["modelcacheentries"],
        "verbs": ["get", "list", "create", "delete"],
    },
    {"apiGroups": [GROUP], "resources": ["modelcacheentries/status"], "verbs": ["patch"]},
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "verbs": ["get", "list", "create", "patch", "delete"],
    },
]
# What the Role in `default` granted (kept as it runs until it goes).
LEGACY_RULES = [
    {
        "apiGroups": [GROUP],
        "resources": [
            "modelmetadatas",
            "modelmetadatas/status",
            "modelcacheentries",
            "modelcacheentries/status",
        ],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
]


def server(kind: str, namespace: str = NAMESPACE) -> dict:
    """One object of the server, in namespace: metadata only, it moves no weights itself."""
    meta = {"name": NAME, "namespace": namespace, "labels": {"app": NAME}}
    if kind == "ServiceAccount":
        return {"apiVersion": "v1", "kind": kind, "metadata": meta}
    if kind == "Role":
        rules = RULES if namespace == NAMESPACE else LEGACY_RULES
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": kind,
            "metadata": meta,
            "rules": rules,
        }
    if kind == "RoleBinding":
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": kind,
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}],
        }
    if kind == "Service":
        port = {"name": "grpc", "port": PORT, "targetPort": PORT, "protocol": "TCP"}
        return {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": meta,
            "spec": {"selector": {"app": NAME}, "ports": [port]},
        }
    return _deployment(meta)


def _deployment(meta: dict) -> dict:
    probe = {"tcpSocket": {"port": PORT}, "periodSeconds": 10}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {
                    "serviceAccountName": NAME,
                    "containers": [
                        {
                            "name": "server",
                            "image": IMAGES[NAME],
                            "ports": [{"name": "grpc", "containerPort": PORT}],
                            "env": [
                                {"name": "MODEL_EXPRESS_CACHE_DIRECTORY", "value": "/mnt/models"},
                                {"name": "HF_HUB_CACHE", "value": "/mnt/models"},
                                {"name": "MX_METADATA_BACKEND", "value": "kubernetes"},
                                {
                                    "name": "POD_NAMESPACE",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                                },
                            ],
                            "readinessProbe": {**probe, "initialDelaySeconds": 5},
                            "livenessProbe": {**probe, "initialDelaySeconds": 15},
                            "volumeMounts": [{"name": "cache", "mountPath": "/mnt/models"}],
                        }
                    ],
                    "volumes": [{"name": "cache", "emptyDir": {}}],
                },
            },
        },
    }


def alias() -> dict:
    """The old Service in `default`, as a DNS alias of the new one. On the type change the API
    server releases the ClusterIP it allocated (the update leaves it as it was: Kubernetes
    pkg/registry/core/service/strategy.go dropTypeDependentFields), kube-proxy drops its rules,
    and cluster DNS answers the old names with a CNAME to the new FQDN; provider-kubernetes'
    server-side apply takes the old selector and ports away (tests/e2e/test_workload.py, with
    the real provider)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME, "namespace": LEGACY_NAMESPACE, "labels": {"app": NAME}},
        "spec": {"type": "ExternalName", "externalName": f"{NAME}.{NAMESPACE}.svc.cluster.local"},
    }


def legacy_service(moved: frozenset[str]) -> dict:
    """The old Service: as it runs until the new server serves, then the alias."""
    return ALIAS if MOVED in moved else LEGACY_SERVICE


# --- the move, read from what is observed ---------------------------------------------------


def moves(observed: Mapping[str, ObservedResource]) -> frozenset[str]:
    """{MOVED} once engines may be pointed at the new server: it is Available and its Service
    composed, or the old Service was already made the alias (never turned back)."""
    seen = observed.get(LEGACY_SERVICE_KEY)
    if seen is None:
        return frozenset()
    aliased = seen.get("spec", "forProvider", "manifest", "spec", "type") == "ExternalName"
    if aliased or (_ready(observed, DEPLOYMENT_KEY) and _ready(observed, SERVICE_KEY)):
        return frozenset({MOVED})
    return frozenset()


def alias_in_place(observed: Mapping[str, ObservedResource]) -> bool:
    """The API server holds the alias: the Service provider-kubernetes last read back from the
    cluster (not the manifest it was given) is an ExternalName."""
    seen = observed.get(LEGACY_SERVICE_KEY)
    return seen is not None and seen.at_provider("manifest", "spec", "type") == "ExternalName"


def legacy_server_retired(observed: Mapping[str, ObservedResource]) -> bool:
    """The old Deployment goes once the alias is in place and the new server is Ready."""
    return alias_in_place(observed) and _ready(observed, DEPLOYMENT_KEY)


def legacy_access_retired(observed: Mapping[str, ObservedResource]) -> bool:
    """The old ServiceAccount, Role and RoleBinding go once the old Deployment has gone."""
    return alias_in_place(observed) and LEGACY_DEPLOYMENT_KEY not in observed


def _ready(observed: Mapping[str, ObservedResource], key: str) -> bool:
    seen = observed.get(key)
    return seen is not None and seen.ready


ALIAS = alias()
LEGACY_SERVICE = server("Service", LEGACY_NAMESPACE)
