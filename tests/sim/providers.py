"""What each provider reports about a managed resource it reconciled: the model the provider
simulators play (the `crossplane render` convergence loop and the real control-plane stage).

The model is written from the providers' documented behaviour, not from the function's output:
for each kind, which `status.atProvider` fields the provider fills (ids, ARNs, endpoints), what it
sets as external name, and which connection details it publishes. Ids are derived from the
resource's name, so a replayed reconcile sees the same ids. `observe(body)` answers for one
composed resource; kinds without an entry get the generic answer (Ready, Synced, id = name).

A `World` holds what exists outside the control plane and is not composed: purchased Capacity
Blocks, the GCP project of a ProviderConfig, the objects a workload cluster already runs.
"""

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from crossplane.function import resource

from function import clock
from function.serving import adoption, gateway_api, gpu_health, gpu_metrics
from function.versions import CHARTS, GATEWAY_API_BUNDLE
from tests.sim import workload

ACCOUNT = "123456789012"
GCP_PROJECT = "modelplane-demo"
AZURE_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class Observation:
    """A provider's report on one resource: its status, external name and connection secret."""

    status: dict
    external_name: str | None = None
    # Connection details the provider writes to spec.writeConnectionSecretToRef (string values).
    connection: dict[str, str] = field(default_factory=dict)


ABSENT: dict = {}  # what an Observe-only Object finds when its object does not exist
# The objects the function's detectors look for by name.
DETECTED_NAMES = frozenset(
    {*(d.name for d in adoption.DETECTORS.values() if not d.labels), gateway_api.SOUGHT.name}
)


@dataclass
class World:
    """Things that exist in the clouds before the function composes anything."""

    # Capacity Block reservation id -> what EC2 reports about it (atProvider fields).
    capacity_reservations: dict[str, dict] = field(default_factory=dict)
    # The address the workload cluster's load balancer gives the inference gateway.
    gateway_address: str | None = workload.GATEWAY_ADDRESS
    # The fleet's InferenceGateways; None when their kind is not even installed.
    inference_gateways: list[dict] | None = None
    # The status of named workload objects where it differs from what their controller usually
    # writes (a GPU probe DaemonSet whose pods are not all ready), by metadata.name.
    remote_status: dict[str, dict] = field(default_factory=dict)
    # What a detector finds on an Existing cluster (a CRD, a webhook configuration), by name
    # (None: absent); any other is the function's own, as its release installed it.
    detected: dict[str, dict | None] = field(default_factory=dict)
    # Objects another team runs on an Existing cluster (manifests with status), as an
    # ObservedObjectCollection finds them by kind and labels.
    running: list[dict] = field(default_factory=list)
    # The workload cluster's Nodes (manifests), as the GPU health reporter lists them.
    gpu_nodes: list[dict] = field(default_factory=list)
    # The version EKS gives the node monitoring agent's add-on when its spec sets none (its
    # default for the cluster's minor, which EKS decides: the one whose chart the function
    # read; None: not reported). Other add-ons' defaults are not modelled.
    node_monitoring_agent: str | None = "v1.7.0-eksbuild.1"


def conditions(ready: bool = True, reason: str = "Available", message: str = "") -> list[dict]:
    ready_condition = {"type": "Ready", "status": "True" if ready else "False", "reason": reason}
    synced = {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}
    if message:
        synced = {"type": "Synced", "status": "False", "reason": "ReconcileError"}
        synced["message"] = message
    return [ready_condition, synced]


def digest(*parts: str, length: int = 17) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:length]


def _name(body: dict) -> str:
    return body.get("metadata", {}).get("name", "")


def _for_provider(body: dict) -> dict:
    return body.get("spec", {}).get("forProvider", {})


def _region(body: dict) -> str:
    return _for_provider(body).get("region", "us-east-1")


def _aws_id(prefix: str) -> Callable[[dict, World], dict]:
    def report(body: dict, world: World) -> dict:
        del world
        return {"id": f"{prefix}-{digest(_name(body))}"}

    return report


def _arn(service: str, resource: str) -> Callable[[dict, World], dict]:
    def report(body: dict, world: World) -> dict:
        del world
        name = _name(body)
        return {"id": name, "arn": f"arn:aws:{service}::{ACCOUNT}:{resource}/{name}"}

    return report


def _eks_cluster(body: dict, world: World) -> dict:
    del world
    name, region = _name(body), _region(body)
    return {
        "id": name,
        "arn": f"arn:aws:eks:{region}:{ACCOUNT}:cluster/{name}",
        "endpoint": f"https://{digest(name, length=32).upper()}.gr7.{region}.eks.amazonaws.com",
        "status": "ACTIVE",
        "version": _for_provider(body).get("version"),
        "vpcConfig": {
            "clusterSecurityGroupId": f"sg-{digest(name, 'cluster-sg')}",
            "vpcId": f"vpc-{digest(name, 'vpc')}",
        },
    }


def _versioned(service: str, resource: str, field: str) -> Callable[[dict, World], dict]:
    """EKS node groups and add-ons report the version they run: the one their spec sets (an
    unset one is EKS's default, which the simulator does not model)."""
    arn = _arn(service, resource)

    def report(body: dict, world: World) -> dict:
        version = _for_provider(body).get(field)
        return {**arn(body, world), **({field: version} if version else {})}

    return report


def _addon(body: dict, world: World) -> dict:
    """An add-on reports its version (as _versioned); the node monitoring agent's, set or not
    (World.node_monitoring_agent)."""
    report = _versioned("eks", "addon", "addonVersion")(body, world)
    default = world.node_monitoring_agent
    if _for_provider(body).get("addonName") == "eks-node-monitoring-agent" and default:
        return {"addonVersion": default, **report}
    return report


def _node_group(body: dict, world: World) -> dict:
    """A node group reports its version (as _versioned) and its Auto Scaling group's sizes: those
    forProvider sends, else the ones it was created with (initProvider); a desired size not sent
    is the created one, which EKS and the autoscaler keep at least the minimum."""
    report = _versioned("eks", "nodegroup", "version")(body, world)
    sent = _for_provider(body).get("scalingConfig") or {}
    created = ((body.get("spec") or {}).get("initProvider") or {}).get("scalingConfig") or {}
    minimum = sent.get("minSize", created.get("minSize", 0))
    maximum = sent.get("maxSize", created.get("maxSize"))
    desired = sent.get("desiredSize")
    if desired is None:
        desired = max(created.get("desiredSize", 0), minimum)
    sizes = {"minSize": minimum, "maxSize": maximum, "desiredSize": desired}
    return {**report, "scalingConfig": sizes}


def _launch_template(body: dict, world: World) -> dict:
    del world
    return {
        "id": f"lt-{digest(_name(body))}",
        "latestVersion": 1,
        "defaultVersion": 1,
        "name": _for_provider(body).get("name"),
    }


def _capacity_reservation(body: dict, world: World) -> dict | None:
    reservation = body.get("metadata", {}).get("annotations", {}).get("crossplane.io/external-name")
    known = world.capacity_reservations.get(reservation or "")
    if known is None:
        return None  # EC2 does not know it: the provider cannot observe it
    return {"id": reservation, **known}


def _gcp(collection: str, regional: bool = False) -> Callable[[dict, World], dict]:
    """GCP names resources by their own name; the id is the resource's path in its project."""

    def report(body: dict, world: World) -> dict:
        del world
        name = _name(body)
        where = f"regions/{_for_provider(body).get('region')}" if regional else "global"
        return {"id": f"projects/{GCP_PROJECT}/{where}/{collection}/{name}"}

    return report


def _gke_cluster(body: dict, world: World) -> dict:
    del world
    name, location = _name(body), _for_provider(body).get("location")
    return {
        "id": f"projects/{GCP_PROJECT}/locations/{location}/clusters/{name}",
        "endpoint": f"34.{int(digest(name, length=2), 16)}.10.1",
        "masterVersion": f"{_for_provider(body).get('minMasterVersion')}.4-gke.1",
        "selfLink": f"https://container.googleapis.com/v1/projects/{GCP_PROJECT}/locations/"
        f"{location}/clusters/{name}",
    }


def _azure(provider: str, collection: str) -> Callable[[dict, World], dict]:
    def report(body: dict, world: World) -> dict:
        del world
        group = _for_provider(body).get("resourceGroupNameRef", {}).get("name", "rg")
        return {
            "id": f"/subscriptions/{AZURE_SUBSCRIPTION}/resourceGroups/{group}/providers/"
            f"{provider}/{collection}/{_name(body)}"
        }

    return report


def _aks_cluster(body: dict, world: World) -> dict:
    report = _azure("Microsoft.ContainerService", "managedClusters")(body, world)
    name = _name(body)
    return {
        **report,
        "fqdn": f"{name}-{digest(name, length=8)}.hcp.{_for_provider(body).get('location')}"
        ".azmk8s.io",
        "oidcIssuerUrl": f"https://oidc.example/{digest(name)}/",
        "nodeResourceGroup": _for_provider(body).get("nodeResourceGroup"),
        "kubernetesVersion": _for_provider(body).get("kubernetesVersion"),
        "automaticUpgradeChannel": _for_provider(body).get("automaticUpgradeChannel"),
        "defaultNodePool": {
            "orchestratorVersion": _for_provider(body)
            .get("defaultNodePool", {})
            .get("orchestratorVersion")
        },
        # AKS picks the newest GA patch of a minor alias.
        "currentKubernetesVersion": _patch(_for_provider(body).get("kubernetesVersion", "")),
        # The system-assigned identity Azure creates with the cluster.
        "identity": {
            "type": "SystemAssigned",
            "principalId": _guid(name, "principal"),
            "tenantId": _guid("tenant"),
        },
    }


def _aks_node_pool(body: dict, world: World) -> dict:
    report = _azure("Microsoft.ContainerService", "agentPools")(body, world)
    return {**report, "orchestratorVersion": _for_provider(body).get("orchestratorVersion")}


def _patch(version: str) -> str:
    """A running version: a minor alias (1.34) gets a patch, an exact version stays."""
    return f"{version}.4" if version.count(".") == 1 else version


def _nebius_cluster(body: dict, world: World) -> dict:
    """mk8s reports the control plane it runs as <major>.<minor>.<patch>-nebius-cp.<infra>."""
    version = _for_provider(body).get("controlPlane", {}).get("version", "")
    return {
        **_nebius("mk8scluster")(body, world),
        "status": {"controlPlane": {"version": f"{_patch(version)}-nebius-cp.2"}},
    }


def _nebius_node_group(body: dict, world: World) -> dict:
    """mk8s reports the version a node group runs as <major>.<minor>.<patch>-nebius-node.<n>,
    settled (no change in flight, no outdated node)."""
    version = _for_provider(body).get("version", "")
    status = {"version": f"{version}.1-nebius-node.3", "reconciling": False}
    return {**_nebius("mk8snodegroup")(body, world), "status": status, "version": version}


def _guid(*parts: str) -> str:
    raw = digest(*parts, length=32)
    return f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}"


def _role_assignment(body: dict, world: World) -> dict:
    del world
    spec = _for_provider(body)
    return {
        "id": f"{spec.get('scope')}/providers/Microsoft.Authorization/roleAssignments/"
        f"{spec.get('name')}",
        "principalId": spec.get("principalId"),
        "roleDefinitionName": spec.get("roleDefinitionName"),
        "scope": spec.get("scope"),
    }


def _nebius(prefix: str) -> Callable[[dict, World], dict]:
    """Nebius ids are <type>-<routing code><weak id>; the resource keeps the name it was given."""

    def report(body: dict, world: World) -> dict:
        del world
        return {
            "id": f"{prefix}-e00{digest(_name(body), length=15)}",
            "name": _for_provider(body).get("name"),
        }

    return report


def _vultr_id(name: str) -> str:
    return _guid(name)


def _vke_cluster(body: dict, world: World) -> dict:
    del world
    cluster_id, spec = _vultr_id(_name(body)), _for_provider(body)
    firewall = body.get("spec", {}).get("initProvider", {}).get("enableFirewall")
    return {
        "id": cluster_id,
        "label": spec.get("label"),
        "region": spec.get("region"),
        "version": spec.get("version"),
        "haControlplanes": spec.get("haControlplanes"),
        # Set at creation only, from initProvider; Read never refreshes it, only the firewall
        # group VKE made (terraform-provider-vultr v2.32.0 resource_vultr_kubernetes.go).
        "enableFirewall": bool(firewall),
        "firewallGroupId": _vultr_id(f"{_name(body)}-firewall") if firewall else "",
        # The default pool, as VKE created it from the inline one (read back by the provider).
        "nodePools": {
            k: v
            for k, v in (
                body.get("spec", {}).get("initProvider", {}).get("nodePools") or {}
            ).items()
            if k in ("label", "plan", "nodeQuantity", "autoScaler", "minNodes", "maxNodes")
        },
        "endpoint": f"{cluster_id}.vultr-k8s.com",
        "status": "active",
    }


def _vke_node_pool(body: dict, world: World) -> dict:
    del world
    return {
        "id": _vultr_id(_name(body)),
        "label": _for_provider(body).get("label"),
        "status": "active",
    }


def own_detected(manifest: dict) -> dict:
    """What a detector (function/serving/adoption.py) finds once the function's own release
    mp-<component> installed it: annotated by Helm, a CRD Established."""
    name = manifest.get("metadata", {}).get("name", "")
    if name == gateway_api.SOUGHT.name:
        return gateway_api_crd(*GATEWAY_API_BUNDLE)
    component = next(
        (c for c, d in adoption.DETECTORS.items() if d.name == name and not d.labels), name
    )
    namespace = CHARTS[component].namespace if component in CHARTS else component
    found = {
        "apiVersion": manifest.get("apiVersion"),
        "kind": manifest.get("kind"),
        "metadata": {
            "name": name,
            "uid": "00000000-0000-0000-0000-000000000002",
            "annotations": {
                "meta.helm.sh/release-name": f"mp-{component}",
                "meta.helm.sh/release-namespace": namespace,
            },
        },
    }
    if manifest.get("kind") == "CustomResourceDefinition":
        found["status"] = {"conditions": [{"type": "Established", "status": "True"}]}
    return found


def gateway_api_crd(version: str, channel: str, annotations: dict | None = None) -> dict:
    """The Gateway CRD of a Gateway API bundle as its install leaves it (gateway-helm's crds/, as
    the upstream bundle: annotated with the bundle's version and channel, not by Helm)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": gateway_api.SOUGHT.name,
            "annotations": {
                gateway_api.BUNDLE_VERSION: version,
                gateway_api.CHANNEL: channel,
                **(annotations or {}),
            },
        },
        "status": {"conditions": [{"type": "Established", "status": "True"}]},
    }


def _object(body: dict, world: World) -> dict:
    """provider-kubernetes reports the remote object, status and all."""
    spec = body.get("spec", {})
    observe_only = not {"*", "Create"} & set(spec.get("managementPolicies") or ["*"])
    manifest = spec.get("forProvider", {}).get("manifest", {})
    name = manifest.get("metadata", {}).get("name", "")
    if observe_only and name == gpu_metrics.SERVICE_MONITOR_CRD:
        # No cluster has Prometheus Operator's CRDs unless the world says so.
        found = world.detected.get(name)
        return {"manifest": ABSENT if found is None else found}
    if observe_only and name in DETECTED_NAMES:
        # What the function only looks for (function/serving/adoption.py): the world's (None:
        # absent), else the function's own, as its release installs it.
        if name in world.detected:
            found = world.detected[name]
            return {"manifest": ABSENT if found is None else found}
        return {"manifest": own_detected(manifest)}
    remote = workload.remote_object(manifest, observe_only, world.gateway_address)
    if observe_only and (manifest.get("kind"), name) == ("ConfigMap", gpu_health.NAME):
        remote["data"] = {gpu_health.DATA_KEY: workload.gpu_report(world.gpu_nodes)}
        written = workload.timestamp(clock.now())
        remote["metadata"].setdefault("annotations", {})[gpu_health.OBSERVED_AT] = written
    override = world.remote_status.get(manifest.get("metadata", {}).get("name", ""))
    if override is not None:
        remote["status"] = override
    return {"manifest": remote}


COLLECTION = ("kubernetes.m.crossplane.io", "ObservedObjectCollection")
MEMBER_LABEL = "kubernetes.crossplane.io/owned-by-collection"


def members(body: dict, world: World) -> list[dict]:
    """The Observe-only Objects provider-kubernetes v1.3.1 makes for an ObservedObjectCollection
    (internal/controller/namespaced/observedobjectcollection): one per object of the kind with the
    selector's labels, named <collection>-<7 hex of its GVK, namespace and name>, labelled with
    the collection's name, reporting the object as observed."""
    spec = body.get("spec", {})
    wanted = spec.get("observeObjects", {})
    labels = wanted.get("selector", {}).get("matchLabels", {})
    collection = body["metadata"]["name"]
    out = []
    for found in world.running:
        meta = found.get("metadata", {})
        if (found.get("apiVersion"), found.get("kind")) != (
            wanted.get("apiVersion"),
            wanted.get("kind"),
        ):
            continue
        if any((meta.get("labels") or {}).get(k) != v for k, v in labels.items()):
            continue
        if wanted.get("namespace") and meta.get("namespace") != wanted["namespace"]:
            continue  # observeObjects.namespace: there only, else every namespace
        group, _, version = found["apiVersion"].rpartition("/")
        gvk = f"{group}/{version}, Kind={found['kind']}"
        name = f"{collection}-{digest(gvk, meta.get('namespace', ''), meta['name'], length=7)}"
        out.append(
            {
                "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
                "kind": "Object",
                "metadata": {
                    "name": name,
                    "namespace": body["metadata"].get("namespace"),
                    "labels": {MEMBER_LABEL: collection},
                },
                "spec": {
                    "managementPolicies": ["Observe"],
                    "providerConfigRef": spec.get("providerConfigRef"),
                    "forProvider": {"manifest": {k: found[k] for k in ("apiVersion", "kind")}},
                },
                "status": {"conditions": conditions(), "atProvider": {"manifest": found}},
            }
        )
    return out


def answer(requirements: dict, composed: list[dict], world: World) -> dict[str, list[dict]]:
    """What Crossplane hands over for each requirement of Objects by label: the members of the
    composed collections that carry the labels (every other requirement the test gives)."""
    pool = [m for body in composed if _kind(body) == COLLECTION for m in members(body, world)]
    out = {}
    for key, want in requirements.items():
        if want.labels is None or (want.api_version, want.kind) != (
            "kubernetes.m.crossplane.io/v1alpha1",
            "Object",
        ):
            continue
        out[key] = [
            over_the_wire(m)
            for m in pool
            if all(m["metadata"]["labels"].get(k) == v for k, v in want.labels.items())
            and (want.namespace is None or m["metadata"]["namespace"] == want.namespace)
        ]
    return out


def over_the_wire(body: dict) -> dict:
    """body as the function reads it from Crossplane's request: a protobuf Struct, whose numbers
    are all doubles (a DaemonSet's desiredNumberScheduled of 4 arrives as 4.0)."""
    return resource.struct_to_dict(resource.dict_to_struct(body))


def _kind(body: dict) -> tuple[str, str]:
    return body.get("apiVersion", "").split("/")[0], body.get("kind", "")


def _release(body: dict, world: World) -> dict:
    del world
    chart = body.get("spec", {}).get("forProvider", {}).get("chart", {})
    return {
        "state": "deployed",
        "revision": 1,
        "releaseDescription": f"Install {chart.get('name')}",
        # The last revision's chart version (provider-helm observe.go generateObservation).
        "version": chart.get("version"),
    }


# (apiVersion group, kind) -> what the provider reports in atProvider.
AT_PROVIDER: dict[tuple[str, str], Callable[[dict, World], dict | None]] = {
    ("ec2.aws.m.upbound.io", "VPC"): _aws_id("vpc"),
    ("ec2.aws.m.upbound.io", "Subnet"): _aws_id("subnet"),
    ("ec2.aws.m.upbound.io", "InternetGateway"): _aws_id("igw"),
    ("ec2.aws.m.upbound.io", "NATGateway"): _aws_id("nat"),
    ("ec2.aws.m.upbound.io", "EIP"): _aws_id("eipalloc"),
    ("ec2.aws.m.upbound.io", "RouteTable"): _aws_id("rtb"),
    ("ec2.aws.m.upbound.io", "Route"): _aws_id("r-rtb"),
    ("ec2.aws.m.upbound.io", "RouteTableAssociation"): _aws_id("rtbassoc"),
    ("ec2.aws.m.upbound.io", "VPCEndpoint"): _aws_id("vpce"),
    ("cloudwatchlogs.aws.m.upbound.io", "Group"): _arn("logs", "log-group"),
    ("ec2.aws.m.upbound.io", "VPCEndpointRouteTableAssociation"): _aws_id("a-vpce"),
    ("ec2.aws.m.upbound.io", "SecurityGroup"): _aws_id("sg"),
    ("ec2.aws.m.upbound.io", "SecurityGroupIngressRule"): _aws_id("sgr"),
    ("ec2.aws.m.upbound.io", "SecurityGroupEgressRule"): _aws_id("sgr"),
    ("ec2.aws.m.upbound.io", "LaunchTemplate"): _launch_template,
    ("ec2.aws.m.upbound.io", "PlacementGroup"): _arn("ec2", "placement-group"),
    ("ec2.aws.m.upbound.io", "CapacityReservation"): _capacity_reservation,
    # CapacityBlockReservation (v2.6.0) reports startDate and endDate besides the same fields.
    ("ec2.aws.m.upbound.io", "CapacityBlockReservation"): _capacity_reservation,
    ("iam.aws.m.upbound.io", "Role"): _arn("iam", "role"),
    ("iam.aws.m.upbound.io", "Policy"): _arn("iam", "policy"),
    ("iam.aws.m.upbound.io", "RolePolicyAttachment"): _aws_id("attach"),
    ("eks.aws.m.upbound.io", "Cluster"): _eks_cluster,
    ("eks.aws.m.upbound.io", "NodeGroup"): _node_group,
    ("eks.aws.m.upbound.io", "Addon"): _addon,
    ("eks.aws.m.upbound.io", "PodIdentityAssociation"): _aws_id("a"),
    ("eks.aws.m.upbound.io", "ClusterAuth"): lambda body, world: {},
    ("efs.aws.m.upbound.io", "FileSystem"): _aws_id("fs"),
    ("efs.aws.m.upbound.io", "MountTarget"): _aws_id("fsmt"),
    ("kubernetes.m.crossplane.io", "Object"): _object,
    ("helm.m.crossplane.io", "Release"): _release,
    ("compute.gcp.m.upbound.io", "Network"): _gcp("networks"),
    ("compute.gcp.m.upbound.io", "Subnetwork"): _gcp("subnetworks", regional=True),
    ("compute.gcp.m.upbound.io", "Router"): _gcp("routers", regional=True),
    ("compute.gcp.m.upbound.io", "RouterNAT"): _gcp("routerNats", regional=True),
    ("compute.gcp.m.upbound.io", "Firewall"): _gcp("firewalls"),
    ("container.gcp.m.upbound.io", "Cluster"): _gke_cluster,
    ("container.gcp.m.upbound.io", "NodePool"): _gcp("nodePools"),
    ("azure.m.upbound.io", "ResourceGroup"): lambda body, world: {
        "id": f"/subscriptions/{AZURE_SUBSCRIPTION}/resourceGroups/{_name(body)}"
    },
    ("network.azure.m.upbound.io", "VirtualNetwork"): _azure(
        "Microsoft.Network", "virtualNetworks"
    ),
    ("network.azure.m.upbound.io", "Subnet"): _azure("Microsoft.Network", "subnets"),
    ("containerservice.azure.m.upbound.io", "KubernetesCluster"): _aks_cluster,
    ("containerservice.azure.m.upbound.io", "KubernetesClusterNodePool"): _aks_node_pool,
    ("authorization.azure.m.upbound.io", "RoleAssignment"): _role_assignment,
    ("vpc.nebius.m.upbound.io", "Network"): _nebius("vpcnetwork"),
    ("vpc.nebius.m.upbound.io", "Subnet"): _nebius("vpcsubnet"),
    ("mk8s.nebius.m.upbound.io", "Cluster"): _nebius_cluster,
    ("mk8s.nebius.m.upbound.io", "NodeGroup"): _nebius_node_group,
    ("compute.nebius.m.upbound.io", "Filesystem"): _nebius("computefilesystem"),
    ("compute.nebius.m.upbound.io", "GpuCluster"): _nebius("computegpucluster"),
    ("vke.vultr.m.upbound.io", "Kubernetes"): _vke_cluster,
    ("vke.vultr.m.upbound.io", "KubernetesNodePool"): _vke_node_pool,
}


def kubeconfig(name: str) -> str:
    """A kubeconfig as a provider writes it (the simulator's; no real credentials)."""
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: {name}, cluster: {{server: 'https://{digest(name)}.example'}}}}]\n"
        f"users: [{{name: {name}, user: {{token: simulated-{digest(name, 'token')}}}}}]\n"
        f"contexts: [{{name: {name}, context: {{cluster: {name}, user: {name}}}}}]\n"
        f"current-context: {name}\n"
    )


# Kinds whose connection secret carries a kubeconfig.
KUBECONFIG_WRITERS = {
    ("eks.aws.m.upbound.io", "ClusterAuth"),
    ("container.gcp.m.upbound.io", "Cluster"),
    ("containerservice.azure.m.upbound.io", "KubernetesCluster"),
    ("mk8s.nebius.m.upbound.io", "Cluster"),
    ("vke.vultr.m.upbound.io", "Kubernetes"),
}


def observe(body: dict, world: World | None = None) -> Observation:
    """What the provider of body reports once it has reconciled it."""
    world = world or World()
    group = body.get("apiVersion", "").split("/")[0]
    kind = body.get("kind", "")
    name = _name(body)
    external = (
        body.get("metadata", {}).get("annotations", {}).get("crossplane.io/external-name", name)
    )
    if (group, kind) == COLLECTION:
        # Not a managed reconciler: no external name, no atProvider; its members are Objects of
        # their own (members), labelled as its status says (v1.3.1 sets Ready once listed).
        status = {"conditions": conditions(), "membershipLabel": {MEMBER_LABEL: name}}
        return Observation(status=status)
    report = AT_PROVIDER.get((group, kind))
    at_provider = report(body, world) if report else {"id": external}
    if at_provider is not None and at_provider.get("manifest") is ABSENT:
        # crossplane-runtime v2.1's words for an Observe-only resource that does not exist.
        return Observation(
            status={
                "conditions": conditions(
                    ready=False,
                    reason="ReconcileError",
                    message="cannot observe external resource: external resource does not exist",
                ),
                "atProvider": {},
            },
            external_name=external,
        )
    if at_provider is None:
        return Observation(
            status={
                "conditions": conditions(
                    ready=False,
                    reason="ReconcileError",
                    message=f"cannot observe external resource: {external} not found",
                ),
                "atProvider": {},
            },
            external_name=external,
        )
    connection = {}
    if (group, kind) in KUBECONFIG_WRITERS and body.get("spec", {}).get(
        "writeConnectionSecretToRef"
    ):
        connection = {"kubeconfig": kubeconfig(name)}
    ready = True
    if (group, kind) == ("kubernetes.m.crossplane.io", "Object"):
        ready = workload.object_ready(body, at_provider["manifest"])
    return Observation(
        status={
            "conditions": conditions(ready, "Available" if ready else "Creating"),
            "atProvider": at_provider,
        },
        external_name=external_name(group, external, at_provider),
        connection=connection,
    )


def external_name(group: str, given: str, at_provider: dict) -> str:
    """AWS, Nebius and Vultr name most resources by the id they assign; GCP and Azure by the name
    they were given (or the external name the resource asked for)."""
    if group.endswith((".aws.m.upbound.io", ".nebius.m.upbound.io", ".vultr.m.upbound.io")):
        return at_provider.get("id", given)
    return given
