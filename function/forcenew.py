"""Never replace what runs: what a provider cannot change in place stays as it is live.

Crossplane runs one function release for every XR it serves, so a new release reconciles every live
cluster within a minute. A field the provider cannot change in place (Terraform `ForceNew` or
`RequiresReplace`, or a field its Update never sends) is either refused by upjet ("refuse to update
the external resource because the following update requires replacing it": the resource stays
Synced=False and takes no other update either) or silently never applied. So once a resource is
observed, a release keeps each such field at the value the live resource has and says so: the XR
gets a Warning naming the resource, what differs and how an operator moves to the new value. New
resources take the new value.

One table, per composed kind, of the fields the function sets that cannot change in place, each
with its source (the Terraform provider each upjet provider pins, at that version). Only
`spec.forProvider` is listed: upjet sends `spec.initProvider` at creation only and drops later
changes to it (filterInitExclusiveDiffs, ignore_changes), so those can never replace anything.
"""

import copy
import json
import marshal
from collections.abc import Iterable, Mapping
from typing import Any

from function.frozen import RECREATE, Composed, Frozen, FrozenKind
from function.inputs import Observed, ObservedResource
from function.output import Desired, Result

TF_GOOGLE = "terraform-provider-google v7.39.0 (provider-upjet-gcp v3.0.0)"
TF_AWS = "terraform-provider-aws v6.34.0 (provider-upjet-aws v2.6.0)"
TF_AZURE = "terraform-provider-azurerm v4.80.0 (provider-upjet-azure v2.7.0)"
TF_NEBIUS = "terraform-provider-nebius v0.6.22 (provider-upjet-nebius v1.0.1), RequiresReplace"
TF_VULTR = "terraform-provider-vultr v2.32.0 (provider-upjet-vultr)"
NODES_GO = "delete it (its nodes and the pods on them go) and the function creates it again"


def _frozen(
    source: str, *paths: str, move: str = RECREATE, replaces=None, optional: bool = False
) -> tuple[Frozen, ...]:
    return tuple(Frozen(tuple(p.split(".")), source, move, replaces, optional) for p in paths)


def _os_family(sku: Any) -> str:
    """AKS moves a pool between Ubuntu and AzureLinux SKUs in place, nothing else."""
    text = str(sku or "")
    return "linux" if text.startswith(("Ubuntu", "AzureLinux")) else text


GCP_DRA_MOVE = (
    "delete the NodePool (its nodes go, and GKE's driver with them); the function creates it "
    "again as a DRA pool (INSTALLATION_DISABLED, the COS installer and the NVIDIA DRA driver)"
)

# (API group, kind) -> the fields that cannot change in place.
FORCE_NEW: Mapping[tuple[str, str], tuple[Frozen, ...]] = {
    # --- GCP: hashicorp/terraform-provider-google v7.39.0 ---------------------------------------
    ("cloudplatform.gcp.m.upbound.io", "ProjectIAMMember"): _frozen(
        f"{TF_GOOGLE}: google_project_iam_member has no update (member, project, role ForceNew)",
        "member",
        "project",
        "role",
    ),
    ("cloudplatform.gcp.m.upbound.io", "ProjectService"): _frozen(
        f"{TF_GOOGLE}: resource_google_project_service.go project, service ForceNew",
        "project",
        "service",
    ),
    ("cloudplatform.gcp.m.upbound.io", "ServiceAccount"): _frozen(
        f"{TF_GOOGLE}: resource_google_service_account.go project ForceNew", "project"
    ),
    ("cloudplatform.gcp.m.upbound.io", "ServiceAccountKey"): _frozen(
        f"{TF_GOOGLE}: resource_google_service_account_key.go private_key_type, "
        "service_account_id ForceNew",
        "privateKeyType",
        "serviceAccountIdRef",
    ),
    ("compute.gcp.m.upbound.io", "Firewall"): _frozen(
        f"{TF_GOOGLE}: resource_compute_firewall.go direction ForceNew (network, allow, "
        "priority, source_ranges change in place)",
        "direction",
    ),
    ("compute.gcp.m.upbound.io", "Network"): _frozen(
        f"{TF_GOOGLE}: resource_compute_network.go auto_create_subnetworks ForceNew",
        "autoCreateSubnetworks",
    ),
    ("compute.gcp.m.upbound.io", "Router"): _frozen(
        f"{TF_GOOGLE}: resource_compute_router.go network, region ForceNew",
        "networkRef",
        "region",
    ),
    ("compute.gcp.m.upbound.io", "RouterNAT"): _frozen(
        f"{TF_GOOGLE}: resource_compute_router_nat.go region, router ForceNew",
        "region",
        "routerRef",
    ),
    ("compute.gcp.m.upbound.io", "Subnetwork"): _frozen(
        f"{TF_GOOGLE}: resource_compute_subnetwork.go network, region ForceNew; ip_cidr_range "
        "ForceNewIfChange unless the new range contains the old",
        "ipCidrRange",
        "networkRef",
        "region",
    ),
    ("container.gcp.m.upbound.io", "Cluster"): (
        *_frozen(
            f"{TF_GOOGLE}: resource_container_cluster.go initial_node_count, location, network, "
            "networking_mode, subnetwork, ip_allocation_policy secondary range names, "
            "private_cluster_config.master_ipv4_cidr_block ForceNew",
            "initialNodeCount",
            "ipAllocationPolicy.clusterSecondaryRangeName",
            "ipAllocationPolicy.servicesSecondaryRangeName",
            "location",
            "networkRef",
            "networkingMode",
            "privateClusterConfig.masterIpv4CidrBlock",
            "subnetworkRef",
            move="the cluster cannot move: create another InferenceCluster and move the workloads",
        ),
        # Dataplane V2 is what enforces NetworkPolicy (gke.DATAPATH): a cluster made before
        # enforces none, which an operator must know (a NetworkPolicy there does nothing), so this
        # is a Warning, not an optional offer.
        *_frozen(
            f"{TF_GOOGLE}: resource_container_cluster.go datapath_provider ForceNew (GKE Dataplane "
            "V2 is chosen when a cluster is created); until then no NetworkPolicy is enforced",
            "datapathProvider",
            move="NetworkPolicy is enforced only on a cluster created with Dataplane V2: create "
            "another InferenceCluster and move the workloads",
        ),
    ),
    ("container.gcp.m.upbound.io", "NodePool"): (
        *_frozen(
            f"{TF_GOOGLE}: resource_container_node_pool.go cluster, location ForceNew; "
            "node_config.go oauth_scopes ForceNew",
            "clusterRef",
            "location",
            "nodeConfig.oauthScopes",
            move=NODES_GO,
        ),
        *_frozen(
            f"{TF_GOOGLE}: node_config.go guest_accelerator ForceNew, and every attribute under "
            "it (count, type, gpu_driver_installation_config)",
            "nodeConfig.guestAccelerator",
            move=GCP_DRA_MOVE,
        ),
    ),
    # --- AWS: terraform-provider-aws v6.34.0 (every regional resource: region ForceNew) ---------
    **{
        ("ec2.aws.m.upbound.io", kind): _frozen(f"{TF_AWS}: region ForceNew", "region")
        for kind in ("CapacityReservation", "InternetGateway")
    },
    ("ec2.aws.m.upbound.io", "EIP"): _frozen(
        f"{TF_AWS}: ec2_eip.go domain ForceNew", "domain", "region"
    ),
    ("ec2.aws.m.upbound.io", "LaunchTemplate"): _frozen(
        f"{TF_AWS}: ec2_launch_template.go name ForceNew (its data makes new versions)",
        "name",
        "region",
    ),
    ("ec2.aws.m.upbound.io", "NATGateway"): _frozen(
        f"{TF_AWS}: vpc_nat_gateway.go allocation_id, connectivity_type, subnet_id ForceNew",
        "allocationIdRef",
        "connectivityType",
        "region",
        "subnetIdRef",
    ),
    ("ec2.aws.m.upbound.io", "Route"): _frozen(
        f"{TF_AWS}: vpc_route.go destination_cidr_block, route_table_id ForceNew",
        "destinationCidrBlock",
        "region",
        "routeTableIdRef",
    ),
    ("ec2.aws.m.upbound.io", "RouteTable"): _frozen(
        f"{TF_AWS}: vpc_route_table.go vpc_id ForceNew", "region", "vpcIdRef"
    ),
    ("ec2.aws.m.upbound.io", "RouteTableAssociation"): _frozen(
        f"{TF_AWS}: vpc_route_table_association.go subnet_id ForceNew", "region", "subnetIdRef"
    ),
    ("ec2.aws.m.upbound.io", "VPCEndpoint"): _frozen(
        f"{TF_AWS}: vpc_endpoint.go service_name, vpc_endpoint_type, vpc_id ForceNew",
        "region",
        "serviceName",
        "vpcEndpointType",
        "vpcIdRef",
    ),
    ("ec2.aws.m.upbound.io", "VPCEndpointRouteTableAssociation"): _frozen(
        f"{TF_AWS}: vpc_endpoint_route_table_association.go route_table_id, vpc_endpoint_id "
        "ForceNew",
        "region",
        "routeTableIdRef",
        "vpcEndpointIdRef",
    ),
    ("ec2.aws.m.upbound.io", "SecurityGroup"): _frozen(
        f"{TF_AWS}: vpc_security_group.go description, name, vpc_id ForceNew",
        "description",
        "name",
        "region",
        "vpcIdRef",
    ),
    **{
        ("ec2.aws.m.upbound.io", kind): _frozen(
            f"{TF_AWS}: vpc_security_group_ingress_rule.go security_group_id RequiresReplace",
            "region",
            "securityGroupIdRef",
        )
        for kind in ("SecurityGroupEgressRule", "SecurityGroupIngressRule")
    },
    ("ec2.aws.m.upbound.io", "Subnet"): _frozen(
        f"{TF_AWS}: vpc_subnet.go availability_zone, cidr_block, vpc_id ForceNew",
        "availabilityZone",
        "cidrBlock",
        "region",
        "vpcIdRef",
    ),
    ("ec2.aws.m.upbound.io", "VPC"): _frozen(
        f"{TF_AWS}: vpc_.go cidr_block ForceNew", "cidrBlock", "region"
    ),
    # The group's name is its external name (NameAsIdentifier), never a forProvider field.
    ("cloudwatchlogs.aws.m.upbound.io", "Group"): _frozen(
        f"{TF_AWS}: logs/group.go log_group_class ForceNew",
        "logGroupClass",
        "region",
        move="delete it (its logs go) and the function creates it again",
    ),
    ("efs.aws.m.upbound.io", "FileSystem"): _frozen(
        f"{TF_AWS}: efs/file_system.go creation_token, encrypted, performance_mode ForceNew",
        "creationToken",
        "encrypted",
        "performanceMode",
        "region",
        move="delete it (the model caches on it go) and the function creates it again",
    ),
    ("efs.aws.m.upbound.io", "MountTarget"): _frozen(
        f"{TF_AWS}: efs/mount_target.go file_system_id, subnet_id ForceNew",
        "fileSystemIdRef",
        "region",
        "subnetIdRef",
    ),
    ("eks.aws.m.upbound.io", "Addon"): _frozen(
        f"{TF_AWS}: eks/addon.go addon_name, cluster_name ForceNew",
        "addonName",
        "clusterNameRef",
        "region",
    ),
    ("eks.aws.m.upbound.io", "Cluster"): _frozen(
        f"{TF_AWS}: eks/cluster.go role_arn, access_config.bootstrap_cluster_creator_admin_"
        "permissions ForceNew",
        "accessConfig.bootstrapClusterCreatorAdminPermissions",
        "region",
        "roleArnRef",
        move="the cluster cannot be replaced in place: create another InferenceCluster",
    ),
    ("eks.aws.m.upbound.io", "NodeGroup"): _frozen(
        f"{TF_AWS}: eks/node_group.go ami_type, capacity_type, cluster_name, disk_size, "
        "instance_types, launch_template.name, node_role_arn, subnet_ids ForceNew",
        "amiType",
        "capacityType",
        "clusterNameRef",
        "diskSize",
        "instanceTypes",
        "launchTemplate.name",
        "nodeRoleArnRef",
        "region",
        "subnetIdRefs",
        move=NODES_GO,
    ),
    ("eks.aws.m.upbound.io", "PodIdentityAssociation"): _frozen(
        f"{TF_AWS}: eks/pod_identity_association.go cluster_name, namespace, service_account "
        "RequiresReplace",
        "clusterNameRef",
        "namespace",
        "region",
        "serviceAccount",
    ),
    ("iam.aws.m.upbound.io", "RolePolicyAttachment"): _frozen(
        f"{TF_AWS}: iam/role_policy_attachment.go has no update (policy_arn, role ForceNew)",
        "policyArn",
        "policyArnRef",
        "roleRef",
    ),
    # --- Azure: terraform-provider-azurerm v4.80.0 ----------------------------------------------
    ("authorization.azure.m.upbound.io", "RoleAssignment"): _frozen(
        f"{TF_AZURE}: role_assignment_resource.go has no update (every argument ForceNew)",
        "name",
        "principalId",
        "principalType",
        "roleDefinitionName",
        "scope",
    ),
    ("azure.m.upbound.io", "ResourceGroup"): _frozen(
        f"{TF_AZURE}: resource_group_resource.go location ForceNew",
        "location",
        move="the resource group cannot move: create another InferenceCluster",
    ),
    ("network.azure.m.upbound.io", "VirtualNetwork"): _frozen(
        f"{TF_AZURE}: virtual_network_resource.go location, resource_group_name ForceNew",
        "location",
        "resourceGroupNameRef",
    ),
    ("network.azure.m.upbound.io", "Subnet"): _frozen(
        f"{TF_AZURE}: subnet_resource.go resource_group_name, virtual_network_name ForceNew",
        "resourceGroupNameRef",
        "virtualNetworkNameRef",
    ),
    ("containerservice.azure.m.upbound.io", "KubernetesCluster"): (
        *_frozen(
            f"{TF_AZURE}: kubernetes_cluster_resource.go dns_prefix, location, "
            "node_resource_group, resource_group_name, network_profile dns_service_ip, "
            "load_balancer_sku, service_cidr ForceNew; CustomizeDiff: default_node_pool.name, "
            "network_plugin, network_plugin_mode, pod_cidr",
            "defaultNodePool.name",
            "dnsPrefix",
            "location",
            "nodeResourceGroup",
            "resourceGroupNameRef",
            "networkProfile.dnsServiceIp",
            "networkProfile.loadBalancerSku",
            "networkProfile.serviceCidr",
            "networkProfile.networkPlugin",
            "networkProfile.networkPluginMode",
            "networkProfile.podCidr",
            move="the cluster cannot be replaced in place: create another InferenceCluster",
        ),
        *_frozen(
            f"{TF_AZURE}: kubernetes_cluster_resource.go CustomizeDiff ForceNewIfChange "
            "oidc_issuer_enabled (true to false only)",
            "oidcIssuerEnabled",
            move="the cluster cannot be replaced in place: create another InferenceCluster",
            replaces=lambda live, new: live is True and new is not True,
        ),
        # Not ForceNew from the azure dataplane and no policy (ForceNewIfChange only from cilium,
        # or to anything but cilium), but AKS re-images every node pool at once to move, GPU
        # nodes included, at whatever hour a release reaches the cluster. Cilium is what
        # enforces NetworkPolicy (aks.DATAPLANE): a cluster made before enforces none, which an
        # operator must know, so this is a Warning, not an optional offer.
        *_frozen(
            f"{TF_AZURE}: kubernetes_cluster_resource.go network_data_plane, network_policy "
            "change in place, but AKS re-images every node pool at once to move to Cilium "
            "(learn.microsoft.com/azure/aks/upgrade-aks-ipam-and-dataplane); until then no "
            "NetworkPolicy is enforced",
            "networkProfile.networkDataPlane",
            "networkProfile.networkPolicy",
            move="NetworkPolicy is enforced only on a cluster created with Cilium: create another "
            "InferenceCluster and move the workloads (not az aks update: it re-images every node, "
            "and the composed cluster, asking for azure's dataplane back, could take no update)",
        ),
    ),
    ("containerservice.azure.m.upbound.io", "KubernetesClusterNodePool"): (
        *_frozen(
            f"{TF_AZURE}: kubernetes_cluster_node_pool_resource.go gpu_driver, "
            "kubernetes_cluster_id ForceNew",
            "gpuDriver",
            "kubernetesClusterIdRef",
            move=NODES_GO,
        ),
        *_frozen(
            f"{TF_AZURE}: kubernetes_cluster_node_pool_resource.go CustomizeDiff os_sku "
            "(in place only between Ubuntu and AzureLinux SKUs)",
            "osSku",
            move=NODES_GO,
            replaces=lambda live, new: _os_family(live) != _os_family(new),
        ),
        # Not ForceNew, but changed only by cycling the pool through temporary_name_for_rotation,
        # which the function does not set on agent pools (a second set of GPU nodes): without it
        # the update fails ("temporary_name_for_rotation must be specified").
        *_frozen(
            f"{TF_AZURE}: kubernetes_cluster_node_pool_resource.go update cycles the pool for "
            "vm_size, os_disk_size_gb, zones, vnet_subnet_id (cycleNodePoolProperties: needs "
            "temporary_name_for_rotation)",
            "vmSize",
            "osDiskSizeGb",
            "zones",
            "vnetSubnetIdRef",
            move=NODES_GO,
        ),
        # Likewise; an ephemeral OS disk is this release's offer (shapes.AKS_EPHEMERAL_OS_GIB), and
        # a pool made before it runs well on its managed one.
        *_frozen(
            f"{TF_AZURE}: kubernetes_cluster_node_pool_resource.go update cycles the pool for "
            "os_disk_type (cycleNodePoolProperties: needs temporary_name_for_rotation)",
            "osDiskType",
            move="optional, for faster boots and reimages: delete it (its nodes and the pods on "
            "them go) and the function creates it again",
            optional=True,
        ),
    ),
    # --- On the workload cluster: what the Kubernetes API refuses to update -----------------------
    # An Object carries one manifest; only a StorageClass has these fields at its top level
    # (ValidateStorageClassUpdate: parameters, provisioner, reclaimPolicy and volumeBindingMode
    # are immutable). provider-kubernetes would be refused ("updates to ... are forbidden").
    ("kubernetes.m.crossplane.io", "Object/StorageClass"): _frozen(
        "Kubernetes API (storage.k8s.io/v1 StorageClass update validation): parameters, "
        "provisioner, reclaimPolicy, volumeBindingMode are immutable",
        "manifest.parameters",
        "manifest.provisioner",
        "manifest.reclaimPolicy",
        "manifest.volumeBindingMode",
        move="delete the StorageClass on the workload cluster (bound volumes stay); the "
        "function creates it again",
    ),
    # --- Nebius: terraform-provider-nebius v0.6.22 (RequiresReplace) -----------------------------
    ("compute.nebius.m.upbound.io", "Filesystem"): _frozen(
        f"{TF_NEBIUS}: compute/v1 filesystem type", "type"
    ),
    ("compute.nebius.m.upbound.io", "GpuCluster"): _frozen(
        f"{TF_NEBIUS}: compute/v1 gpu_cluster infiniband_fabric", "infinibandFabric"
    ),
    ("mk8s.nebius.m.upbound.io", "Cluster"): _frozen(
        f"{TF_NEBIUS}: mk8s/v1 cluster control_plane.subnet_id",
        "controlPlane.subnetIdRef",
        move="the cluster cannot move: create another InferenceCluster and move the workloads",
    ),
    ("mk8s.nebius.m.upbound.io", "NodeGroup"): _frozen(
        f"{TF_NEBIUS}: mk8s/v1 node_group parent_id", "parentIdRef", move=NODES_GO
    ),
    # --- Vultr: terraform-provider-vultr v2.32.0 ----------------------------------------------
    ("vke.vultr.m.upbound.io", "Kubernetes"): _frozen(
        f"{TF_VULTR}: vultr/vke.go ha_controlplanes, region ForceNew",
        "haControlplanes",
        "region",
        move="the cluster cannot move: create another InferenceCluster and move the workloads",
    ),
    ("vke.vultr.m.upbound.io", "KubernetesNodePool"): (
        *_frozen(f"{TF_VULTR}: vultr/vke.go cluster_id ForceNew", "clusterIdRef", move=NODES_GO),
        # Not ForceNew, but the provider's Update never sends them (the Vultr API's node pool
        # update has no plan or label): a change would never be applied and stay a diff for ever.
        *_frozen(
            f"{TF_VULTR}: resource_vultr_kubernetes_nodepools.go Update sends neither plan nor "
            "label",
            "plan",
            "label",
            move=NODES_GO,
        ),
    ),
}

_MISSING = object()


# FORCE_NEW by kind, then by API group: keep_live passes over the kinds it has nothing for (Usages,
# most of the stack) on their kind alone. An Object is known by its manifest's kind
# (Object/<kind>), so only the manifests with immutable fields are looked at.
_BY_KIND: dict[str, dict[str, FrozenKind]] = {}
_BY_MANIFEST_KIND: dict[str, dict[str, FrozenKind]] = {}
for (_group, _kind), _fields in FORCE_NEW.items():
    _entry = FrozenKind(f"frozen {_group}/{_kind}", _fields)
    if _kind.startswith("Object/"):
        _BY_MANIFEST_KIND.setdefault(_kind.removeprefix("Object/"), {})[_group] = _entry
    else:
        _BY_KIND.setdefault(_kind, {})[_group] = _entry


def _frozen_of(body: dict) -> FrozenKind | None:
    """The frozen fields of a composed resource's kind, if it has any."""
    kind = body.get("kind")
    if kind == "Object":
        manifest = body.get("spec", {}).get("forProvider", {}).get("manifest") or {}
        by_group = _BY_MANIFEST_KIND.get(manifest.get("kind"))
    else:
        by_group = _BY_KIND.get(kind)
    if by_group is None:
        return None
    return by_group.get(body.get("apiVersion", "").partition("/")[0])


def composed(body: dict) -> Composed | None:
    """body's frozen fields and their values, if its kind has any (a shared body comes with them,
    found once: Desired.frozen)."""
    of = _frozen_of(body)
    if of is None:
        return None
    spec = body.get("spec", {}).get("forProvider", {})
    return Composed(of, body["kind"], _values(_at(spec, f.path) for f in of.fields))


def _at(node: Any, path: tuple[str, ...]) -> Any:
    """The value at path (dict keys only), or _MISSING."""
    for step in path:
        if not isinstance(node, dict) or step not in node:
            return _MISSING
        node = node[step]
    return node


def _live(seen: ObservedResource, frozen: tuple[Frozen, ...]) -> tuple[Any, bytes]:
    """seen's kind and its frozen fields' values, as _values gives them."""
    values = (seen.get("spec", "forProvider", *field.path) for field in frozen)
    return seen.get("kind"), _values(_MISSING if v is None else v for v in values)


def _values(values: Iterable[Any]) -> bytes:
    """Values, _MISSING as Ellipsis (which JSON cannot hold), marshalled: equal bytes, equal
    values. Version 2 writes a string alike whether it is interned or not, and no references, so
    equal values read from the wire and composed give equal bytes (a pair that differs only so is
    looked at field by field, as any that differs is)."""
    return marshal.dumps(tuple(... if v is _MISSING else v for v in values), 2)


def _value(found: Any) -> Any:
    return None if found is _MISSING else found


def _put(node: dict, path: tuple[str, ...], value: Any) -> None:
    """Set (or, for _MISSING, remove) the value at path, making the dicts on the way."""
    *parents, last = path
    for step in parents:
        node = node.setdefault(step, {})
    if value is _MISSING:
        node.pop(last, None)
    else:
        node[last] = copy.deepcopy(value)


def _shown(value: Any, limit: int = 120) -> str:
    if value is _MISSING:
        return "unset"
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def keep_live(
    resources: dict[str, Desired], observed: Observed
) -> tuple[dict[str, Desired], list[Result]]:
    """resources with every frozen field of an observed resource at its live value, and one
    Warning for each resource this release would have changed so, naming every such field (Normal
    when each is only an offer of this release, Frozen.optional)."""
    kept = dict(resources)
    results: list[Result] = []
    for key, desired in resources.items():
        # A shared body (made once a cluster and handed out again) comes with its frozen fields
        # and their values, found when it was made: it is not read unless one moved, since in a
        # fleet what a cluster keeps is out of the CPU's caches when its composition comes.
        made = desired.frozen if desired.shared else composed(desired.body)
        seen = observed.resources.get(key) if made else None
        if seen is None:
            continue
        frozen = made.of.fields
        # What the live resource has, read once per observed version: nearly every time, every
        # frozen field is what this release composes, and one comparison says so.
        live_kind, live_values = seen.derived(made.of.noted_as, lambda s, f=frozen: _live(s, f))
        if live_kind != made.kind or live_values == made.values:
            continue
        body = desired.body
        kind, new_spec = made.kind, body.get("spec", {}).get("forProvider", {})
        changed: dict | None = None
        said: list[str] = []
        held: list[Frozen] = []
        for field in frozen:
            # Only the frozen leaves of the live body are read (fn.py's resources read the wire).
            found = seen.get("spec", "forProvider", *field.path)
            live = _MISSING if found is None else found
            new = _at(new_spec, field.path)
            if new == live:
                continue
            if field.replaces is not None and not field.replaces(_value(live), _value(new)):
                continue
            if changed is None:
                changed = copy.deepcopy(body)
            path = field.path
            if live is _MISSING:
                # Absent live: so is the outermost block the live resource lacks.
                path = next(
                    path[:i]
                    for i in range(1, len(path) + 1)
                    if seen.get("spec", "forProvider", *path[:i]) is None
                )
            _put(changed["spec"].setdefault("forProvider", {}), path, live)
            said.append(
                f"forProvider.{'.'.join(field.path)} stays {_shown(live)} (this release: "
                f"{_shown(new)}; {field.source})"
            )
            held.append(field)
        if changed is not None:
            # A change the spec asked for is a Warning, and its way to move is the one said.
            asked = [f for f in held if not f.optional]
            move = (asked or held)[-1].move
            kept[key] = Desired(body=changed, ready=desired.ready)
            name = body.get("metadata", {}).get("name", key)
            results.append(
                Result(
                    "Warning" if asked else "Normal",
                    f"{kind} {name} ({key}) keeps what cannot change in place, as the live "
                    f"resource has it: {'; '.join(said)}. To move to this release's: {move}",
                    reason="KeptLiveField",
                )
            )
    return kept, results
