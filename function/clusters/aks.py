"""Source AKS: a resource group, a virtual network, the AKS cluster (Azure CNI overlay, system
identity) and one agent pool per node pool, with InfiniBand through the NVIDIA network operator
and Azure Files Premium for the model cache, as namespaced provider-upjet-azure resources.
"""

from function import kube, names, shapes
from function.clusters.base import (
    GPU_TAINT,
    NO_LATE_INIT,
    SYSTEM_LABELS,
    Cloud,
    Pool,
    pool_labels,
    scaling,
)
from function.clusters.facts import ClusterFacts
from function.models import AKS
from function.versions import AKS_SYSTEM_VM_SIZE

AZURE = "azure.m.upbound.io/v1beta1"
NETWORK = "network.azure.m.upbound.io/v1beta1"
CONTAINERS = "containerservice.azure.m.upbound.io/v1beta1"
STORAGE_CLASS = "modelplane-rwx-fs"
# Nodes in the VNet; pods and services in overlay ranges that cannot collide with it.
VNET_CIDR = "10.0.0.0/16"
NODE_SUBNET = "10.0.0.0/20"
POD_CIDR = "10.244.0.0/16"
SERVICE_CIDR = "10.96.0.0/16"
DNS_SERVICE_IP = "10.96.0.10"
# The default (system) agent pool; user pools are named after their node pool.
SYSTEM_POOL = "mpsystem"
TAINT = f"{GPU_TAINT['key']}={GPU_TAINT['value']}:{GPU_TAINT['effect']}"
# Model weights are large, read-mostly files: long attribute caching, no per-file share lock.
MOUNT_OPTIONS = [
    "dir_mode=0777",
    "file_mode=0777",
    "uid=0",
    "gid=0",
    "mfsymlinks",
    "cache=strict",
    "actimeo=30",
    "nosharesock",
]


class AKSCluster:
    def __init__(self, cloud: Cloud, settings: AKS) -> None:
        self.cloud = cloud
        self.location = settings.location
        self.version = settings.kubernetes_version
        self.group = cloud.name("aks", limit=90)
        self.cluster_name = cloud.name("aks")
        self.tags = {"modelplane-cluster": cloud.xr}

    def render(self) -> ClusterFacts:
        c = self.cloud
        pools = c.pools("AKS", "aks")
        self.network()
        self.control_plane()
        for pool in pools:
            self.node_pool(pool)
        provider_config = c.provider_configs(c.is_ready("cluster"))
        infiniband = [p for p in pools if p.spec.fabric and p.spec.fabric.type == "InfiniBand"]
        if infiniband:
            self.network_operator(provider_config)
        storage_class = self.storage_class(provider_config)
        return c.facts(provider_config, storage_class)

    def network(self) -> None:
        c = self.cloud
        in_group = {"resourceGroupNameRef": {"name": self.group}}
        c.managed(
            "resource-group",
            AZURE,
            "ResourceGroup",
            self.group,
            {"location": self.location, "tags": self.tags},
        )
        c.managed(
            "virtual-network",
            NETWORK,
            "VirtualNetwork",
            c.name("vnet"),
            {
                "location": self.location,
                **in_group,
                "addressSpace": [VNET_CIDR],
                "tags": self.tags,
            },
        )
        c.managed(
            "subnet",
            NETWORK,
            "Subnet",
            c.name("nodes"),
            {
                **in_group,
                "virtualNetworkNameRef": {"name": c.name("vnet")},
                "addressPrefixes": [NODE_SUBNET],
            },
        )

    def control_plane(self) -> None:
        c = self.cloud
        c.managed(
            "cluster",
            CONTAINERS,
            "KubernetesCluster",
            self.cluster_name,
            {
                "location": self.location,
                "resourceGroupNameRef": {"name": self.group},
                "dnsPrefix": c.name("aks", limit=54),
                "kubernetesVersion": self.version,
                "nodeResourceGroup": f"{self.group}-nodes"[:90],
                "identity": {"type": "SystemAssigned"},
                "oidcIssuerEnabled": True,
                "workloadIdentityEnabled": True,
                "defaultNodePool": {
                    "name": SYSTEM_POOL,
                    "vmSize": AKS_SYSTEM_VM_SIZE,
                    "autoScalingEnabled": True,
                    "minCount": 1,
                    "maxCount": 3,
                    "osDiskSizeGb": 100,
                    "temporaryNameForRotation": f"{SYSTEM_POOL}tmp",
                    "vnetSubnetIdRef": {"name": c.name("nodes")},
                    "nodeLabels": SYSTEM_LABELS,
                },
                "networkProfile": {
                    "networkPlugin": "azure",
                    "networkPluginMode": "overlay",
                    "podCidr": POD_CIDR,
                    "serviceCidr": SERVICE_CIDR,
                    "dnsServiceIp": DNS_SERVICE_IP,
                    "loadBalancerSku": "standard",
                },
                "tags": self.tags,
            },
            # The autoscaler owns the system pool's size after the first node.
            init_provider={"defaultNodePool": {"nodeCount": 1}},
            policies=NO_LATE_INIT,
            connection_secret=names.kubeconfig_secret(c.xr),
        )

    def node_pool(self, pool: Pool) -> None:
        c, shape = self.cloud, pool.shape
        self.check_shape(pool)
        size = scaling(pool.spec)
        accelerator = shape.accelerator.type if shape.accelerator else None
        for_provider: dict = {
            "kubernetesClusterIdRef": {"name": self.cluster_name},
            "mode": "User",
            "vmSize": shape.vm_size,
            "osDiskSizeGb": shape.disk_size_gb,
            "osSku": "Ubuntu",
            "orchestratorVersion": self.version,
            "vnetSubnetIdRef": {"name": c.name("nodes")},
            # AKS installs the NVIDIA driver; the DRA driver, not a device plugin, allocates.
            "gpuDriver": "Install",
            "nodeLabels": pool_labels(pool, accelerator),
            "nodeTaints": [TAINT],
            "tags": self.tags,
        }
        if pool.spec.zones:
            for_provider["zones"] = pool.spec.zones
        init = None
        if size.autoscaling:
            for_provider |= {
                "autoScalingEnabled": True,
                "minCount": size.minimum,
                "maxCount": size.maximum,
            }
            init = {"nodeCount": size.initial}
        else:
            for_provider |= {"autoScalingEnabled": False, "nodeCount": size.initial}
        key = f"nodepool-{pool.name}"
        if not c.when(key, "cluster" in c.resources, "the cluster"):
            return
        c.managed(
            key,
            CONTAINERS,
            "KubernetesClusterNodePool",
            c.name("np", pool.name),
            for_provider,
            init_provider=init,
            policies=NO_LATE_INIT,
            # The agent pool name users see in Azure: the pool's own (admission keeps it valid).
            annotations={names.EXTERNAL_NAME: pool.name},
            labels={"modelplane.ai/pool": pool.name},
        )

    def check_shape(self, pool: Pool) -> None:
        c, shape = self.cloud, pool.shape
        where = f"pool {pool.name!r} (class {pool.cls.name!r}, {shape.vm_size})"
        size = shape.vm_size.lower()
        gpus = shapes.AKS_SIZES.get(size)
        if pool.spec.fabric and pool.spec.fabric.type == "InfiniBand":
            if size not in shapes.AKS_INFINIBAND:
                c.warn(
                    f"{where}: fabric InfiniBand asked, but {shape.vm_size} has no InfiniBand "
                    "(RDMA sizes carry an r, e.g. Standard_ND96isr_H100_v5)"
                )
            if scaling(pool.spec).maximum < 2:
                c.warn(f"{where}: InfiniBand connects two nodes or more; the pool has one")
        if gpus is None:
            c.warn(f"{where}: VM size not in the shape table; composed as asked")
            return
        if shape.accelerator and shape.accelerator.count != gpus:
            c.warn(
                f"{where}: the class's accelerator count {shape.accelerator.count} disagrees "
                f"with the {gpus} GPUs of {shape.vm_size}"
            )

    def network_operator(self, provider_config: str | None) -> None:
        c = self.cloud
        tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        values = {
            "deployCR": True,
            # node-feature-discovery comes with the serving stack; one instance per cluster.
            "nfd": {"enabled": False},
            "ofedDriver": {"deploy": True},
            "rdmaSharedDevicePlugin": {
                "deploy": True,
                "resources": [
                    {
                        "name": "rdma_shared_device_ib",
                        "vendors": ["15b3"],
                        "linkTypes": ["infiniband"],
                    }
                ],
            },
            "operator": {"tolerations": tolerations},
            "daemonsets": {"tolerations": tolerations},
        }
        c.install("network-operator", provider_config, values)

    def storage_class(self, provider_config: str | None) -> str | None:
        c = self.cloud
        key = "storage-class-rwx-fs"
        if provider_config is None or not c.on_cluster(key):
            return None
        manifest = kube.storage_class(
            STORAGE_CLASS,
            "file.csi.azure.com",
            parameters={"skuName": "Premium_LRS"},
            mountOptions=MOUNT_OPTIONS,
            reclaimPolicy="Delete",
            allowVolumeExpansion=True,
            volumeBindingMode="WaitForFirstConsumer",
        )
        c.put(key, provider_config, manifest)
        return STORAGE_CLASS
