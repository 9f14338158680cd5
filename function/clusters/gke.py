"""Source GKE: a VPC-native regional GKE cluster with private nodes, GPU node pools and the
Filestore CSI driver, as namespaced provider-upjet-gcp resources.

The project comes from the GCP ProviderConfig the credentials name (fetched as a required
resource): Workload Identity needs it in the cluster's spec. The ProviderConfigs reaching the
cluster authenticate with its kubeconfig plus that ProviderConfig's own credentials Secret as
GoogleApplicationCredentials (GKE's kubeconfig carries no user credentials of its own).
"""

import math

from function import kube, names, shapes
from function.clusters.base import (
    NO_LATE_INIT,
    SYSTEM_LABELS,
    Cloud,
    Pool,
    pool_labels,
    scaling,
)
from function.clusters.facts import ClusterFacts
from function.models import GKE

CONTAINER = "container.gcp.m.upbound.io/v1beta1"
COMPUTE = "compute.gcp.m.upbound.io/v1beta1"
STORAGE_CLASS = "modelplane-rwx"
# GKE installs the NVIDIA driver here on COS; the DRA driver must be told.
NVIDIA_DRIVER_ROOT = "/home/kubernetes/bin/nvidia"
IMAGE = "COS_CONTAINERD"
SYSTEM_MACHINE_TYPE = "e2-standard-4"
# A regional cluster without node locations runs a pool in (usually) three zones.
DEFAULT_ZONES = 3
NODE_CIDR = "10.0.0.0/20"
POD_CIDR = "10.4.0.0/14"
SERVICE_CIDR = "10.8.0.0/20"
MASTER_CIDR = "172.16.0.0/28"
# GKE's own GPU taint; set explicitly so every GPU pool has exactly it, never a second one.
GKE_GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}
OAUTH = ["https://www.googleapis.com/auth/cloud-platform"]


class GKECluster:
    def __init__(self, cloud: Cloud, settings: GKE) -> None:
        self.cloud = cloud
        self.region = settings.region
        self.version = settings.kubernetes_version
        self.cluster_name = cloud.name("gke", limit=40)
        self.labels = {"modelplane-ai-cluster": names.cloud_name(cloud.xr)}

    def render(self) -> ClusterFacts:
        c = self.cloud
        config = c.cloud_provider_config("gcp.m.upbound.io")
        project = (config.spec or {}).get("projectID")
        if config.answered and not project and c.observed("cluster") is None:
            message = (
                f"GCP {config.describe} not found or has no projectID; the GKE cluster needs "
                "its project for Workload Identity and waits for it"
            )
            c.warn(message, reason="ProviderConfigNotFound")
        pools = c.pools("GKE", "gke")
        self.network()
        self.control_plane(project)
        self.system_pool()
        for pool in pools:
            self.node_pool(pool)
        identity = config.secret_identity("GoogleApplicationCredentials")
        if identity is None and config.spec is not None and c.observed("cluster") is None:
            c.warn(
                f"GCP {config.describe} has no credentials Secret; the cluster's ProviderConfigs "
                "authenticate with the kubeconfig alone",
                reason="UnsupportedIdentity",
            )
        provider_config = c.provider_configs(
            c.is_ready("cluster"), identity or c.remembered_identity()
        )
        storage_class = self.storage_class(provider_config)
        facts = c.facts(provider_config, storage_class)
        facts.nvidia_driver_root = NVIDIA_DRIVER_ROOT
        return facts

    def mr(self, key: str, api: str, kind: str, name: str, for_provider: dict, **kw) -> dict:
        return self.cloud.managed(key, api, kind, name, for_provider, **kw)

    def network(self) -> None:
        c = self.cloud
        network = {"networkRef": {"name": c.name("vpc")}}
        self.mr(
            "network",
            COMPUTE,
            "Network",
            c.name("vpc"),
            {"autoCreateSubnetworks": False, "routingMode": "REGIONAL"},
        )
        self.mr(
            "subnetwork",
            COMPUTE,
            "Subnetwork",
            c.name("nodes"),
            {
                "region": self.region,
                **network,
                "ipCidrRange": NODE_CIDR,
                "privateIpGoogleAccess": True,
                "secondaryIpRange": [
                    {"rangeName": "pods", "ipCidrRange": POD_CIDR},
                    {"rangeName": "services", "ipCidrRange": SERVICE_CIDR},
                ],
            },
        )
        # Private nodes reach registries and model hubs through Cloud NAT.
        self.mr("router", COMPUTE, "Router", c.name("router"), {"region": self.region, **network})
        self.mr(
            "router-nat",
            COMPUTE,
            "RouterNAT",
            c.name("nat"),
            {
                "region": self.region,
                "routerRef": {"name": c.name("router")},
                "natIpAllocateOption": "AUTO_ONLY",
                "sourceSubnetworkIpRangesToNat": "ALL_SUBNETWORKS_ALL_IP_RANGES",
            },
        )

    def control_plane(self, project: str | None) -> None:
        c = self.cloud

        def build(project: str) -> None:
            self.mr(
                "cluster",
                CONTAINER,
                "Cluster",
                self.cluster_name,
                {
                    "location": self.region,
                    "minMasterVersion": self.version,
                    "releaseChannel": {"channel": "REGULAR"},
                    "deletionProtection": False,
                    # The default pool is replaced by the pools below.
                    "removeDefaultNodePool": True,
                    "initialNodeCount": 1,
                    "networkRef": {"name": c.name("vpc")},
                    "subnetworkRef": {"name": c.name("nodes")},
                    "networkingMode": "VPC_NATIVE",
                    "ipAllocationPolicy": {
                        "clusterSecondaryRangeName": "pods",
                        "servicesSecondaryRangeName": "services",
                    },
                    "privateClusterConfig": {
                        "enablePrivateNodes": True,
                        "enablePrivateEndpoint": False,
                        "masterIpv4CidrBlock": MASTER_CIDR,
                    },
                    "workloadIdentityConfig": {"workloadPool": f"{project}.svc.id.goog"},
                    "addonsConfig": {"gcpFilestoreCsiDriverConfig": {"enabled": True}},
                    "resourceLabels": self.labels,
                },
                connection_secret=names.kubeconfig_secret(c.xr),
            )

        c.keep_or_build("cluster", {"project": project}, build, "the GCP project id")

    def node_pool_mr(
        self, key: str, name: str, node_config: dict, zones: list[str], size: tuple[int, int, int]
    ) -> None:
        """A regional node pool sized in totals across its zones; GKE's autoscaler owns the size
        after the first nodes, which are per zone."""
        if not self.cloud.when(key, "cluster" in self.cloud.resources, "the cluster"):
            return
        minimum, maximum, initial = size
        for_provider: dict = {
            "clusterRef": {"name": self.cluster_name},
            "location": self.region,
            "management": {"autoRepair": True, "autoUpgrade": True},
            "nodeConfig": {
                "imageType": IMAGE,
                "oauthScopes": OAUTH,
                "workloadMetadataConfig": {"mode": "GKE_METADATA"},
                **node_config,
            },
            "autoscaling": {
                "totalMinNodeCount": minimum,
                "totalMaxNodeCount": maximum,
                "locationPolicy": "ANY",
            },
        }
        if zones:
            for_provider["nodeLocations"] = zones
        per_zone = math.ceil(initial / (len(zones) or DEFAULT_ZONES))
        self.mr(
            key,
            CONTAINER,
            "NodePool",
            name,
            for_provider,
            init_provider={"initialNodeCount": per_zone},
            policies=NO_LATE_INIT,
        )

    def system_pool(self) -> None:
        c = self.cloud
        self.node_pool_mr(
            "system-nodepool",
            c.name("system", limit=40),
            {"machineType": SYSTEM_MACHINE_TYPE, "diskSizeGb": 100, "labels": SYSTEM_LABELS},
            [],
            (1, 3, 1),
        )

    def node_pool(self, pool: Pool) -> None:
        c, shape = self.cloud, pool.shape
        self.check_shape(pool)
        size = scaling(pool.spec)
        labels = pool_labels(pool, shape.accelerator.type) | {
            # GKE's managed NVIDIA DRA driver path: no device plugin on these nodes.
            "cloud.google.com/gke-nvidia-gpu-dra-driver": "true"
        }
        self.node_pool_mr(
            f"nodepool-{pool.name}",
            c.name("np", pool.name, limit=40),
            {
                "machineType": shape.machine_type,
                "diskSizeGb": shape.disk_size_gb,
                "labels": labels,
                "taint": [GKE_GPU_TAINT],
                "guestAccelerator": [
                    {
                        "type": shape.accelerator.type,
                        "count": shape.accelerator.count,
                        "gpuDriverInstallationConfig": {"gpuDriverVersion": "DEFAULT"},
                    }
                ],
            },
            pool.spec.zones,
            (size.minimum, max(size.maximum, 1), size.initial),
        )

    def check_shape(self, pool: Pool) -> None:
        c, shape = self.cloud, pool.shape
        accelerator = shape.accelerator
        where = f"pool {pool.name!r} (class {pool.cls.name!r}, {shape.machine_type})"
        machines = shapes.GKE_ACCELERATORS.get(accelerator.type)
        attachable = shapes.GKE_ATTACHABLE.get(accelerator.type)
        if not pool.spec.zones:
            c.warn(
                f"{where}: no zones; GKE spreads the pool over the region's zones, and "
                f"{accelerator.type} may not be offered in all of them",
                reason="PoolWithoutZones",
            )
        if machines is None and attachable is None:
            c.warn(f"{where}: accelerator {accelerator.type} is not in the shape table")
            return
        if attachable is not None:
            if not shape.machine_type.startswith(attachable):
                c.warn(
                    f"{where}: {accelerator.type} attaches to {attachable}* machine types, "
                    f"not {shape.machine_type}"
                )
            return
        gpus = machines.get(shape.machine_type)
        if gpus is None:
            family = shapes.gke_machine_family(shape.machine_type)
            c.warn(
                f"{where}: {accelerator.type} does not exist on machine type "
                f"{shape.machine_type} (family {family})"
            )
        elif gpus != accelerator.count:
            c.warn(
                f"{where}: {shape.machine_type} carries {gpus} {accelerator.type}, but the "
                f"class asks for {accelerator.count}"
            )

    def storage_class(self, provider_config: str | None) -> str | None:
        c = self.cloud
        key = "storage-class-rwx"
        if provider_config is None or not c.on_cluster(key):
            return None
        network = c.observed("network")

        def build(network_name: str) -> None:
            manifest = kube.storage_class(
                STORAGE_CLASS,
                "filestore.csi.storage.gke.io",
                parameters={"tier": "enterprise", "network": network_name},
                reclaimPolicy="Delete",
                volumeBindingMode="Immediate",
                allowVolumeExpansion=True,
            )
            c.put(key, provider_config, manifest)

        name = (network.external_name or network.get("metadata", "name")) if network else None
        c.keep_or_build(
            key,
            {"network_name": name if network and network.ready else None},
            build,
            "the VPC network",
        )
        return STORAGE_CLASS if key in c.resources else None
