"""Source AKS: a resource group, a virtual network, the AKS cluster (Azure CNI overlay powered by
Cilium, system identity, Network Contributor on its subnet) and one agent pool per node pool, with
InfiniBand through the NVIDIA network operator and Azure Files Premium for the model cache, as
namespaced provider-upjet-azure resources.

InfiniBand reaches the pods as Azure's aks-rdma-infiniband guide sets it up: the network operator,
then its NicClusterPolicy (the DOCA-OFED driver and the RDMA shared device plugin) and the
nvidia-peermem reloader (AKS installs the GPU driver, which does not load nvidia-peermem).
"""

import uuid
from datetime import datetime, timedelta

from function import clock, failures, kube, names, shapes
from function.clusters import calendars, rollout
from function.clusters.base import (
    GPU_TAINT,
    NO_LATE_INIT,
    SYSTEM_LABELS,
    SYSTEM_NODES,
    Cloud,
    Minor,
    Pool,
    minor,
    pool_labels,
    scaling,
    text,
)
from function.clusters.facts import ClusterFacts
from function.inputs import ObservedResource
from function.models import AKS
from function.versions import (
    AKS_SYSTEM_VM_SIZE,
    CLOUD_CHARTS,
    IMAGES,
    NIC_CLUSTER_POLICY_IMAGES,
    Image,
)
from function.workload import (
    GATEWAY_LOAD_BALANCER,
    GPU_TOLERATION,
    NODE_FEATURE_DISCOVERY_RELEASE,
)

AZURE = "azure.m.upbound.io/v1beta1"
NETWORK = "network.azure.m.upbound.io/v1beta1"
CONTAINERS = "containerservice.azure.m.upbound.io/v1beta1"
AUTHORIZATION = "authorization.azure.m.upbound.io/v1beta1"
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
SUBNET_ROLE = "subnet-network-contributor"
# Azure CNI Powered by Cilium on the overlay the cluster already has: Cilium enforces Kubernetes
# NetworkPolicy with no separate engine (learn.microsoft.com/azure/aks/azure-cni-powered-by-cilium;
# networkPolicy cilium needs networkDataPlane cilium, azurerm v4.80.0). InfiniBand is untouched:
# the RDMA shared device plugin hands pods the HCAs below the IP stack, and no IPoIB or Multus
# interface is composed (Azure/aks-rdma-infiniband: "RDMA over InfiniBand operates below the
# TCP/IP stack"), so Cilium sees only the pods' eth0, NCCL's bootstrap included. azurerm changes
# both in place, but AKS then re-images every node pool at once, GPU pools included and outside
# the node OS window (learn.microsoft.com/azure/aks/upgrade-aks-ipam-and-dataplane): a cluster
# made before keeps its dataplane (function/forcenew.py) and the XR says so.
DATAPLANE = {"networkDataPlane": "cilium", "networkPolicy": "cilium"}
# The label the network operator finds NVIDIA NICs by (pkg/nodeinfo NodeLabelMlnxNIC), which the
# stack's NFD sets from the chart's NodeFeatureRule (vendor 15b3, class 0200 or 0207).
MLNX_NIC_LABEL = "feature.node.kubernetes.io/pci-15b3.present"
# The network operator reconciles only the NicClusterPolicy of this name.
NIC_CLUSTER_POLICY = "nic-cluster-policy"
NIC_POLICY_READY = (
    "has(object.status) && has(object.status.state) && object.status.state == 'ready'"
)
# Every reloader pod scheduled has loaded nvidia-peermem (its startup probe).
DAEMONSET_READY = (
    "has(object.status) && has(object.status.desiredNumberScheduled)"
    " && has(object.status.numberReady)"
    " && object.status.numberReady == object.status.desiredNumberScheduled"
)
# How long a node's drain may take before AKS gives up on it (AKS's own default when unset, made
# explicit so that it is the same on every pool and shows in the spec): a pod whose disruption
# budget allows no eviction then fails the pool's upgrade instead of holding it. Set once, it stays:
# azurerm v4.80.0 replaces a pool, or the cluster for the system pool, whose drain timeout or
# undrainable behaviour goes back to unset (kubernetes_cluster_node_pool_resource.go and
# kubernetes_cluster_resource.go CustomizeDiff: ForceNewIfChange only from a value to 0 or "");
# from unset to a value, or between values, is an in-place agent pool update.
DRAIN_TIMEOUT_MINUTES = 30
# GPU pools upgrade a node at a time with no surge node (node_pool says why maxSurge is not set).
# No undrainableNodeBehavior Cordon here: Cordon replaces a blocked node with a surge node and
# keeps that one, and with maxSurge 0 there is none, so the node would stay cordoned (a GPU node
# out of service) and the upgrade end canceled (AKS API UndrainableNodeBehavior: "If there are
# enough surge nodes to replace blocked nodes ... failed state. Otherwise ... canceled state").
# AKS's default, Schedule, leaves the blocked node serving, not upgraded, and the upgrade failed.
GPU_UPGRADE = {"maxUnavailable": "1", "drainTimeoutInMinutes": DRAIN_TIMEOUT_MINUTES}
# The system pool surges (a CPU VM is there to be had) one node, AKS's 10% of its two or three
# nodes rounded up; azurerm requires maxSurge in the default pool's upgrade settings. A node
# whose drain cannot finish is cordoned (labelled kubernetes.azure.com/upgrade-status=Quarantined)
# and replaced by its surge node, and the rest of the pool still upgrades (AKS API
# UndrainableNodeBehavior Cordon); the upgrade then ends failed and says so.
SYSTEM_UPGRADE = {
    "maxSurge": "1",
    "drainTimeoutInMinutes": DRAIN_TIMEOUT_MINUTES,
    "undrainableNodeBehavior": "Cordon",
}
# A pool asked for a minor (or its update failing) this long without being done is a stalled
# step: past azurerm v4.80.0's 60-minute update timeout and its retry
# (kubernetes_cluster_node_pool_resource.go Timeouts.Update).
STALL_AFTER_HOURS = 2
# By default AKS reimages every node each week with a new node image, at any hour ("the default
# cadence means there's no planned maintenance window applied",
# learn.microsoft.com/azure/aks/auto-upgrade-node-os-image): each GPU node of a pool, one after
# the other, drained in the middle of a working day. SecurityPatch reimages only for the
# security patches of the image's maintainer, and the node OS window keeps every reimage to
# Sunday 00:00-08:00 UTC (a pool larger than a window takes goes on the next Sunday).
NODE_OS_UPGRADE_CHANNEL = "SecurityPatch"
# The Standard tier: the control plane's uptime SLA and the API server capacity AKS sizes for
# production; the Free tier is for development and testing, with no SLA and fewer API requests
# (learn.microsoft.com/azure/aks/free-standard-pricing-tiers). $0.10 an hour a cluster.
# The gateway's Azure Standard Load Balancer drops a flow after 4 idle minutes by default (Azure
# Load Balancer "Configure TCP reset and idle timeout": 4 to 100 minutes): a long prefill, a
# non-streamed generation or an idle keep-alive connection would be reset. cloud-provider-azure
# sets the rule's idle timeout from this Service annotation (minutes; kubernetes/kubernetes#66045),
# in place on a live load balancer.
LOAD_BALANCER_ANNOTATIONS = (
    ("service.beta.kubernetes.io/azure-load-balancer-tcp-idle-timeout", "30"),
)
SKU_TIER = "Standard"
# Patches of the Kubernetes minor by AKS's own channel: with none (azurerm's default when
# automaticUpgradeChannel is omitted) only a cluster upgrade moves a patch, and AKS supports only
# a minor's latest stable patches (AKS "Supported Kubernetes versions"); setting the minor alias
# again does not upgrade a patch either (the same page: "upgrading from 1.14.x to 1.14 won't
# trigger an upgrade to the latest GA 1.14 patch").
# `patch` moves the control plane, then each agent pool, to the minor's newest GA patch, and never
# to another minor (AKS "Automatically upgrade an AKS cluster"); only inside the window below.
# With a channel set AKS refuses a control plane upgrade without its pools (the same page,
# "Cluster auto-upgrade limitations": NotAllAgentPoolOrchestratorVersionSpecifiedAndUnchanged),
# and azurerm v4.80.0 upgrades the control plane alone (kubernetes_version is a PUT of the managed
# cluster with its pools unchanged, the pools then through the agent pool API): so a minor step
# the spec asks for turns the channel off first, and it comes back once every pool runs the minor.
UPGRADE_CHANNEL = "patch"
# Kubernetes patches on Saturday, node OS security patches on Sunday: never both in one night, and
# 8 hours over the 4 AKS asks of an auto-upgrade window (the same page, "Use auto-upgrade with
# Planned Maintenance").
AUTO_UPGRADE_WINDOW = {
    "frequency": "Weekly",
    "interval": 1,
    "dayOfWeek": "Saturday",
    "startTime": "00:00",
    "utcOffset": "+00:00",
    "duration": 8,
}
NODE_OS_WINDOW = {
    "frequency": "Weekly",
    "interval": 1,
    "dayOfWeek": "Sunday",
    "startTime": "00:00",
    "utcOffset": "+00:00",
    "duration": 8,
}
# What an InfiniBand pool's replicas ask for beside their GPUs: the RDMA shared device plugin's
# extended resource, a Synthetic device (no DRA claim: a pod requests rdma/shared_ib and IPC_LOCK),
# published as the Nebius classes publish theirs. Shared (rdmaHcaMax below), so one per pod.
RDMA_RESOURCE = "rdma/shared_ib"
INFINIBAND_DEVICE = {
    "name": "infiniband",
    "claim": "Synthetic",
    "driver": RDMA_RESOURCE,
    "count": 1,
    "attributes": {"linkType": {"string": "infiniband"}},
}
# status.gpuPools[].devices holds at most 16 (the spec).
MAX_POOL_DEVICES = 16
# The RDMA shared device plugin's resource (rdma/shared_ib): every HCA of vendor 15b3 on an
# InfiniBand link, shared by up to 63 pods a node (the guide's rdma-shared-device-plugin overlay).
RDMA_SHARED_CONFIG = """{
  "configList": [
    {
      "resourceName": "shared_ib",
      "rdmaHcaMax": 63,
      "selectors": {"vendors": ["15b3"], "linkTypes": ["infiniband"]}
    }
  ]
}"""


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
        calendars.check(c, calendars.AKS, self.version)
        self.control_plane_version = self.step()
        self.moving = self.rollout(pools)
        self.network()
        self.control_plane()
        self.subnet_role()
        for pool in pools:
            self.node_pool(pool)
        provider_config = c.provider_configs(c.is_ready("cluster"))
        self.infiniband(provider_config)
        storage_class = self.storage_class(provider_config)
        facts = c.facts(provider_config, storage_class)
        facts.pool_devices = self.infiniband_devices(pools)
        facts.load_balancer_annotations = LOAD_BALANCER_ANNOTATIONS
        return facts

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
                "kubernetesVersion": self.control_plane_version,
                "nodeResourceGroup": f"{self.group}-nodes"[:90],
                "identity": {"type": "SystemAssigned"},
                "oidcIssuerEnabled": True,
                "workloadIdentityEnabled": True,
                "skuTier": SKU_TIER,
                **self.channel(),
                "maintenanceWindowAutoUpgrade": {**AUTO_UPGRADE_WINDOW},
                "nodeOsUpgradeChannel": NODE_OS_UPGRADE_CHANNEL,
                "maintenanceWindowNodeOs": {**NODE_OS_WINDOW},
                "defaultNodePool": {
                    "name": SYSTEM_POOL,
                    "vmSize": AKS_SYSTEM_VM_SIZE,
                    "autoScalingEnabled": True,
                    "minCount": SYSTEM_NODES[0],
                    "maxCount": SYSTEM_NODES[1],
                    "osDiskSizeGb": 100,
                    "temporaryNameForRotation": f"{SYSTEM_POOL}tmp",
                    "orchestratorVersion": self.pool_version(SYSTEM_POOL),
                    "upgradeSettings": dict(SYSTEM_UPGRADE),
                    "vnetSubnetIdRef": {"name": c.name("nodes")},
                    "nodeLabels": SYSTEM_LABELS,
                },
                "networkProfile": {
                    "networkPlugin": "azure",
                    "networkPluginMode": "overlay",
                    **DATAPLANE,
                    "podCidr": POD_CIDR,
                    "serviceCidr": SERVICE_CIDR,
                    "dnsServiceIp": DNS_SERVICE_IP,
                    "loadBalancerSku": "standard",
                },
                "tags": self.tags,
            },
            # No nodeCount, not even at creation: azurerm starts an autoscaling pool at minCount,
            # and upjet (as provider-upjet-azure v2.7.0 pins it, before upjet#728) compares an
            # initProvider field nested in defaultNodePool on every sync, so once the autoscaler
            # moved the pool, every update would ask for 1 node again and azurerm v4.80.0 refuses
            # it ("cannot change `node_count` when `auto_scaling_enabled` is set"), blocking
            # version steps with it.
            policies=NO_LATE_INIT,
            connection_secret=names.kubeconfig_secret(c.xr),
        )

    def running(self) -> str | None:
        seen = self.cloud.observed("cluster")
        version = seen.at_provider("currentKubernetesVersion") if seen else None
        return version if isinstance(version, str) and version else None

    def step(self) -> str:
        """The minor the control plane asks for: the spec's, or the next one on the way to it.
        AKS cannot skip a minor (learn.microsoft.com/azure/aks/upgrade-aks-cluster) and its
        pools follow each step, so the next one starts once every pool runs the control plane's
        minor and the patch channel is off (UPGRADE_CHANNEL says why). Only `1.NN`: AKS takes the
        alias and runs its newest patch; within a minor the cluster asks for what the provider
        reads back, so the patches AKS applies are never undone or fought."""
        running = self.running()
        want = minor(self.version)
        if running is None:
            return self.unobserved()
        have = minor(running)
        if want is None or have is None:
            return self.version
        holds = self.holds(have)
        if want < have:
            self.cloud.warn(
                f"spec.cluster.aks.kubernetesVersion {self.version} is older than the "
                f"control plane's {running}: AKS moved the cluster past it (a platform-initiated "
                "upgrade at the end of a version's support, pools included) or the spec was "
                f"lowered, and AKS cannot downgrade a cluster, so it stays at {running}; set "
                f"{text(have)} or newer",
                reason="VersionDowngrade",
            )
            return holds
        if want == have:
            return holds
        if self.lagging(have) or self.channel_on():
            return holds
        step = rollout.step(
            self.cloud, "spec.cluster.aks.kubernetesVersion", self.version, running, "AKS"
        )
        return text(step or want)

    def unobserved(self) -> str:
        """Before the control plane reports a version (or while its status is lost): what it
        was asked for, else at creation the spec's minor."""
        seen = self.cloud.observed("cluster")
        asked = seen.get("spec", "forProvider", "kubernetesVersion") if seen else None
        if isinstance(asked, str) and asked:
            return asked
        want = minor(self.version)
        return text(want) if want else self.version

    def holds(self, have: Minor) -> str:
        """What the control plane asks for within the minor it runs: what the provider reads
        back (AKS's own patches included), else what it asked, else the minor."""
        seen = self.cloud.observed("cluster")
        for value in (
            seen.at_provider("kubernetesVersion") if seen else None,
            seen.get("spec", "forProvider", "kubernetesVersion") if seen else None,
        ):
            if isinstance(value, str) and minor(value) == have:
                return value
        return text(have)

    def lagging(self, have: Minor) -> bool:
        """Whether the system pool or an observed agent pool reports another minor than have
        (one that reports none yet was made at the control plane's version)."""
        return any(v is not None and minor(v) != have for v in self.pool_versions())

    def channel_on(self) -> bool:
        seen = self.cloud.observed("cluster")
        return bool(seen and seen.at_provider("automaticUpgradeChannel") == UPGRADE_CHANNEL)

    def channel(self) -> dict:
        """The patch channel, except while a minor step is asked for or under way (the spec's
        minor is not the control plane's, or a pool lags it): AKS refuses a control plane upgrade
        without its pools while a channel is set. Omitted is none (azurerm)."""
        running = self.running()
        have, want = minor(running), minor(self.version)
        seen = self.cloud.observed("cluster")
        if seen is None:  # created on the channel
            return {"automaticUpgradeChannel": UPGRADE_CHANNEL}
        if running is None:  # its status lost for a moment: as it was asked
            asked = seen.get("spec", "forProvider", "automaticUpgradeChannel")
            return {"automaticUpgradeChannel": asked} if asked else {}
        if have is None or (want is not None and want > have) or self.lagging(have):
            return {}
        return {"automaticUpgradeChannel": UPGRADE_CHANNEL}

    def pool_versions(self) -> list[str | None]:
        """What the system pool and each observed agent pool run, as the provider reports it."""
        c = self.cloud
        seen = c.observed("cluster")
        out = [seen.at_provider("defaultNodePool", "orchestratorVersion") if seen else None]
        for key, pool in sorted(c.inputs.observed.resources.items()):
            if key.startswith("nodepool-"):
                out.append(pool.at_provider("orchestratorVersion"))
        return out

    def rollout(self, pools: list[Pool]) -> frozenset[str]:
        """The pools that ask for the control plane's minor this reconcile (rollout.movers): the
        system pool, then the agent pools one at a time, GPU pools last."""
        have = minor(self.running())
        if have is None:
            return frozenset()
        c = self.cloud
        cluster = c.observed("cluster")
        members = [
            rollout.Member(
                SYSTEM_POOL,
                gpu=False,
                exists=cluster is not None,
                asked=minor(self.seen("cluster", "defaultNodePool")),
                runs=minor(self.seen("cluster", "defaultNodePool", at=True)),
                ready=c.is_ready("cluster") and not failing(cluster),
            )
        ]
        for pool in pools:
            key = f"nodepool-{pool.name}"
            members.append(
                rollout.Member(
                    key,
                    gpu=pool.shape.accelerator is not None,
                    exists=c.observed(key) is not None,
                    asked=minor(self.seen(key)),
                    runs=minor(self.seen(key, at=True)),
                    ready=c.is_ready(key) and not failing(c.observed(key)),
                )
            )
        moving = rollout.movers(members, have)
        rollout.say(c, members, have, moving)
        self.stalled(members, have, moving)
        return moving

    def seen(self, key: str, *path: str, at: bool = False) -> str | None:
        """A pool's orchestratorVersion as asked (spec.forProvider) or read back (atProvider)."""
        seen = self.cloud.observed(key)
        if seen is None:
            return None
        field = (*path, "orchestratorVersion")
        value = seen.at_provider(*field) if at else seen.get("spec", "forProvider", *field)
        return value if isinstance(value, str) and value else None

    def pool_version(self, name: str) -> str:
        """Agent pools follow the control plane, never lead it (AKS upgrades a pool only to a
        version its control plane runs, learn.microsoft.com/azure/aks/upgrade-aks-cluster), one
        at a time (rollout), and ask for its minor alias, `1.NN`: AKS runs the minor's newest
        patch and keeps the alias as asked (orchestratorVersion: "minor version aliases such as
        1.22 are also supported"), asking the alias again never upgrades a patch (AKS "Supported
        Kubernetes versions"), and azurerm v4.80.0 takes an alias of an available version
        (validateNodePoolSupportsVersion). So a patch the channel applies is never answered by a
        PUT of the patch before it, which AKS refuses as a downgrade. A pool on the control
        plane's minor, or whose turn has come, asks for the alias; one whose turn has not keeps
        what it asks for."""
        key, path = ("cluster", ("defaultNodePool",)) if name == SYSTEM_POOL else (name, ())
        running = self.running()
        asked, back = self.seen(key, *path), self.seen(key, *path, at=True)
        if running is None:  # created with the control plane, or its status lost: hold
            return asked or self.control_plane_version
        have = minor(running)
        if have is None:
            return asked or running
        on_minor = have in (minor(back), minor(asked))
        if on_minor or asked is None or name in self.moving:
            return text(have)
        return asked

    def stalled(self, members: "list[rollout.Member]", have: Minor, moving: frozenset[str]) -> None:
        """A Warning naming each pool whose step has stalled: asked for the control plane's
        minor and not done with it STALL_AFTER_HOURS after its provider began reporting it
        failing or not Ready, in the provider's words. azurerm reads a pool's
        orchestratorVersion as asked, not as run (kubernetes_cluster_node_pool_resource.go
        Read), so the conditions are what tells a step that stopped: a drain AKS gave up on, a
        quota or capacity refusal. The pools after it wait, and so does the patch channel."""
        c = self.cloud
        for m in members:
            if m.key not in moving or m.asked != have or rollout.done(m, have):
                continue
            seen = c.observed("cluster" if m.key == SYSTEM_POOL else m.key)
            since, said = trouble(seen)
            if since is None or not clock.reached(since + timedelta(hours=STALL_AFTER_HOURS)):
                continue
            pool = m.key.removeprefix("nodepool-")
            c.warn(
                f"node pool {pool!r} has not finished its upgrade to {text(have)}: its provider "
                f"has reported it failing or not Ready since {since.isoformat()} ({said}); the "
                f"pools after it wait, and so does AKS's patch channel, off until every pool "
                f"runs {text(have)}",
                reason="UpgradeStalled",
            )

    def node_pool(self, pool: Pool) -> None:
        c, shape = self.cloud, pool.shape
        self.check_shape(pool)
        size = c.sizes(pool, "AKS")
        accelerator = shape.accelerator.type if shape.accelerator else None
        for_provider: dict = {
            "kubernetesClusterIdRef": {"name": self.cluster_name},
            "mode": "User",
            "vmSize": shape.vm_size,
            "osDiskSizeGb": shape.disk_size_gb,
            "osSku": "Ubuntu",
            "orchestratorVersion": self.pool_version(f"nodepool-{pool.name}"),
            "vnetSubnetIdRef": {"name": c.name("nodes")},
            # AKS installs the NVIDIA driver; the DRA driver, not a device plugin, allocates.
            "gpuDriver": "Install",
            "nodeLabels": pool_labels(pool, accelerator),
            "nodeTaints": [TAINT],
            # Upgrades take a node down at a time and add none: a surge node is one more GPU VM,
            # which quota or capacity often refuses ("Customize unavailable nodes during
            # upgrade": maxSurge 0 with maxUnavailable 1). maxUnavailable alone: azurerm v4.80.0
            # then sends maxSurge "0" itself, and reads a "0" back as unset, so a maxSurge given
            # here would differ on every sync and update the pool for ever.
            "upgradeSettings": dict(GPU_UPGRADE),
            "tags": self.tags,
        }
        if pool.spec.zones:
            for_provider["zones"] = pool.spec.zones
        if shape.disk_size_gb <= shapes.AKS_EPHEMERAL_OS_GIB.get(shape.vm_size.lower(), 0):
            # The OS on the VM's own cache or temp disk: faster boots and reimages (AKS best
            # practices, "Ephemeral OS disk"). Unset is Managed (azurerm).
            for_provider["osDiskType"] = "Ephemeral"
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

    def subnet_role(self) -> None:
        """Network Contributor on the node subnet for the cluster's identity: on a VNet it does
        not own, AKS can put no load balancer (an internal one above all) into the subnet
        without it (learn.microsoft.com/azure/aks/aks-service-permissions; Azure/AKS#357)."""
        c = self.cloud
        cluster, subnet = c.observed("cluster"), c.observed("subnet")

        def build(principal: str, scope: str) -> None:
            c.managed(
                SUBNET_ROLE,
                AUTHORIZATION,
                "RoleAssignment",
                c.name("subnet-network-contributor"),
                {
                    # Azure names role assignments by a GUID; a fixed one makes a create that
                    # is retried find its own assignment instead of adding a second one.
                    "name": str(uuid.uuid5(uuid.NAMESPACE_URL, f"modelplane.ai/{c.xr}/{scope}")),
                    "principalId": principal,
                    "principalType": "ServicePrincipal",
                    "roleDefinitionName": "Network Contributor",
                    "scope": scope,
                },
            )

        c.keep_or_build(
            SUBNET_ROLE,
            {
                "principal": cluster.at_provider("identity", "principalId") if cluster else None,
                "scope": subnet.at_provider("id") if subnet else None,
            },
            build,
            "the cluster's identity and the subnet id",
        )
        # The gateway's load balancer goes while the identity may still manage the subnet.
        c.outlives.append((SUBNET_ROLE, GATEWAY_LOAD_BALANCER))

    # --- InfiniBand -----------------------------------------------------------------------------

    def infiniband(self, provider_config: str | None) -> None:
        """The network operator, then its NicClusterPolicy and the nvidia-peermem reloader, for
        the spec's InfiniBand pools (from the spec, never from classes resolved this time, so a
        class missing for a moment changes nothing on the nodes)."""
        pools = sorted(
            p.name
            for p in self.cloud.inputs.xr.spec.node_pools
            if p.fabric and p.fabric.type == "InfiniBand"
        )
        if not pools:
            return
        self.network_operator(provider_config)
        self.nic_cluster_policy(provider_config, pools)
        self.peermem_reloader(provider_config, pools)

    def infiniband_devices(self, pools: list[Pool]) -> dict[str, tuple[dict, ...]]:
        """The RDMA device each InfiniBand pool publishes beside its class's devices, unless the
        class declares it: without it no replica asks for rdma/shared_ib (or IPC_LOCK), and
        NCCL falls back to TCP."""
        out = {}
        for pool in pools:
            if not (pool.spec.fabric and pool.spec.fabric.type == "InfiniBand"):
                continue
            devices = pool.cls.spec.devices
            if any(d.driver == RDMA_RESOURCE for d in devices):
                continue
            if len(devices) >= MAX_POOL_DEVICES:
                self.cloud.warn(
                    f"pool {pool.name!r}: class {pool.cls.name!r} declares {len(devices)} "
                    f"devices, the most status.gpuPools holds, so its InfiniBand device "
                    f"{RDMA_RESOURCE} is not published: declare it in place of another",
                    reason="InfiniBandDeviceUnpublished",
                )
                continue
            out[pool.name] = (INFINIBAND_DEVICE,)
        return out

    def network_operator(self, provider_config: str | None) -> None:
        """Only values network-operator 26.4.0 reads (values.yaml, templates/): since 26.4.0 the
        NicClusterPolicy is no longer in the chart (upstream 8fc96f20) but composed below."""
        values = {
            # node-feature-discovery comes with the serving stack (one instance per cluster); the
            # chart's NodeFeatureRule still goes in, and the stack's NFD labels the NICs by it.
            "nfd": {"enabled": False, "deployNodeFeatureRules": True},
        }
        # The NodeFeatureRule needs NFD's CRDs: after the stack's node-feature-discovery.
        after = (NODE_FEATURE_DISCOVERY_RELEASE,)
        self.cloud.install("network-operator", provider_config, values, after)

    def nic_cluster_policy(self, provider_config: str | None, pools: list[str]) -> None:
        """DOCA-OFED and the RDMA shared device plugin on the InfiniBand pools' nodes, as the
        guide's nicclusterpolicy base and rdma-shared-device-plugin overlay configure them, at
        the network operator's own image versions; tolerating the GPU taint."""
        c = self.cloud
        key = "nic-cluster-policy"
        if provider_config is None or not c.on_cluster(key, ("release-network-operator",)):
            return
        probe = {"initialDelaySeconds": 10, "periodSeconds": 20}
        manifest = {
            "apiVersion": "mellanox.com/v1alpha1",
            "kind": "NicClusterPolicy",
            "metadata": {"name": NIC_CLUSTER_POLICY},
            "spec": {
                "nodeAffinity": infiniband_affinity(pools, MLNX_NIC_LABEL),
                "tolerations": [GPU_TOLERATION],
                "ofedDriver": {
                    **image(NIC_CLUSTER_POLICY_IMAGES["ofedDriver"]),
                    # The guide's fix for a race where the kernel module fails to load
                    # (Mellanox/doca-driver-build#52).
                    "env": [
                        {
                            "name": "OFED_BLACKLIST_MODULES_FILE",
                            "value": "/host/etc/modprobe.d/blacklist-ofed-modules.conf",
                        }
                    ],
                    "forcePrecompiled": False,
                    "upgradePolicy": {
                        "autoUpgrade": True,
                        "maxParallelUpgrades": 1,
                        "drain": {
                            "enable": True,
                            "force": True,
                            "deleteEmptyDir": True,
                            "timeoutSeconds": 300,
                        },
                    },
                    "startupProbe": probe,
                    "livenessProbe": {"initialDelaySeconds": 30, "periodSeconds": 30},
                    "readinessProbe": {"initialDelaySeconds": 10, "periodSeconds": 30},
                },
                "rdmaSharedDevicePlugin": {
                    **image(NIC_CLUSTER_POLICY_IMAGES["rdmaSharedDevicePlugin"]),
                    "config": RDMA_SHARED_CONFIG,
                },
            },
        }
        c.put(key, provider_config, manifest, ready_when=NIC_POLICY_READY)

    def peermem_reloader(self, provider_config: str | None, pools: list[str]) -> None:
        """The guide's nvidia-peermem-reloader: GPUDirect RDMA needs nvidia-peermem, which the
        driver AKS installs (gpuDriver Install) does not load. On the InfiniBand pools' GPU
        nodes, tolerating their taint, in the network operator's namespace."""
        c = self.cloud
        key = "nvidia-peermem-reloader"
        if provider_config is None or not c.on_cluster(key, ("release-network-operator",)):
            return
        name = "nvidia-peermem-reloader"
        modprobe = ["/bin/bash", "-c", "modprobe nvidia-peermem"]
        manifest = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": CLOUD_CHARTS["network-operator"].namespace},
            "spec": {
                "selector": {"matchLabels": {"name": name}},
                "updateStrategy": {"type": "RollingUpdate"},
                "template": {
                    "metadata": {"labels": {"name": name}},
                    "spec": {
                        "tolerations": [GPU_TOLERATION],
                        # AKS labels the nodes it installs the GPU driver on.
                        "affinity": {
                            "nodeAffinity": infiniband_affinity(
                                pools, "kubernetes.azure.com/accelerator", "nvidia"
                            )
                        },
                        "priorityClassName": "system-node-critical",
                        "containers": [
                            {
                                "name": "nvidia-peermem-reloader-ctr",
                                "image": IMAGES["nvidia-peermem-reloader"],
                                "command": [
                                    "/bin/bash",
                                    "-xc",
                                    "apt update && apt install -y kmod && modprobe nvidia-peermem"
                                    ' && echo "sleeping" && sleep inf',
                                ],
                                "startupProbe": {
                                    "exec": {"command": modprobe},
                                    "initialDelaySeconds": 10,
                                    "failureThreshold": 120,
                                    "successThreshold": 1,
                                    "periodSeconds": 10,
                                    "timeoutSeconds": 10,
                                },
                                "livenessProbe": {
                                    "exec": {"command": modprobe},
                                    "periodSeconds": 30,
                                    "initialDelaySeconds": 30,
                                    "failureThreshold": 1,
                                    "successThreshold": 1,
                                    "timeoutSeconds": 10,
                                },
                                "securityContext": {"privileged": True},
                                "volumeMounts": [
                                    {
                                        "name": "lib-modules",
                                        "mountPath": "/lib/modules",
                                        "readOnly": True,
                                    }
                                ],
                            }
                        ],
                        "volumes": [
                            {
                                "name": "lib-modules",
                                "hostPath": {"path": "/lib/modules", "type": "Directory"},
                            }
                        ],
                    },
                },
            },
        }
        c.put(key, provider_config, manifest, ready_when=DAEMONSET_READY)

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


# Conditions a provider sets False while a resource cannot be brought to its spec: upjet's
# Synced (ReconcileError) and LastAsyncOperation (an async update that failed or timed out), and
# Crossplane's Ready.
TROUBLE_CONDITIONS = ("Synced", "LastAsyncOperation", "Ready")


def failing(seen: ObservedResource | None) -> bool:
    """Whether the provider reports an update of seen failing (Synced or LastAsyncOperation
    False): a pool whose upgrade failed or timed out still reads as asked and Ready, so the
    rollout holds the pools after it until the provider reports it through. Never for good:
    upjet clears both at the first observation that finds the resource as asked (upjet
    external_async_tfpluginsdk.go Observe)."""
    return seen is not None and any(
        (seen.condition(t) or {}).get("status") == "False" for t in TROUBLE_CONDITIONS[:2]
    )


def trouble(seen: ObservedResource | None) -> tuple[datetime | None, str]:
    """Since when a resource's provider reports it failing or not Ready (the earliest such
    condition's lastTransitionTime), and what it says, in its own words; (None, "") when
    nothing is False or no time is given."""
    if seen is None:
        return None, ""
    times, said = [], []
    for type_ in TROUBLE_CONDITIONS:
        condition = seen.condition(type_)
        if not condition or condition.get("status") != "False":
            continue
        when = clock.parse(condition.get("lastTransitionTime"))
        if when is not None:
            times.append(when)
        said.append(failures.words(condition.get("message")) or condition.get("reason") or "")
    if not times:
        return None, ""
    return min(times), next((w for w in said if w), "not Ready")


def image(spec: Image) -> dict:
    return {"repository": spec.repository, "image": spec.image, "version": spec.version}


def infiniband_affinity(pools: list[str], label: str, value: str = "true") -> dict:
    """Nodes of the InfiniBand pools that carry label=value."""
    term = {
        "matchExpressions": [
            {"key": names.POOL_LABEL, "operator": "In", "values": pools},
            {"key": label, "operator": "In", "values": [value]},
        ]
    }
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
